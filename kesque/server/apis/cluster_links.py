"""KesqueClusterLinks (kesque-only API key 10000, :mod:`kesque.protocol.cluster_links`): the
requests of ``kesque cluster-links`` and ``kesque mirrors`` (docs/mirror.md).

Changes (create and delete a link, create a mirror topic, pause and resume mirrors) run where the
active controller is: in-process when it is local, otherwise the request is sent on to the active
controller's listener (as this node: the caller was checked here, ALTER on the cluster, as
Confluent's cluster-link APIs ask). A mirror topic's creation first asks the source cluster (over
the link) for the source topic's id and partition count. Describes answer from this node's
image: the lag of a mirror partition is known to its leader only, so a describe answers the
partitions this broker leads (the tool asks every broker).
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from ...config.types import ConfigError
from ...errors import ErrorCode, KafkaError, error_name
from ...metadata.image import MIRROR_STATES
from ...mirror import links as link_rules
from ...mirror import offsets as offset_rules
from ...protocol import cluster_links as cl
from ...protocol.api import KESQUE_CLUSTER_LINKS, Api
from ..channel import ChannelError
from ..context import CLUSTER_NAME, AclOperation, ResourceType
from ..drivers.mirror_fetcher import SourceCluster, source_security

log = logging.getLogger(__name__)

_ZERO = uuid.UUID(int=0)
_RETRY_S = 0.05
_CHANGES = (
    cl.CREATE_LINK,
    cl.DELETE_LINK,
    cl.CREATE_MIRROR,
    cl.ALTER_MIRRORS,
    cl.GROW_MIRROR,
    cl.ALTER_LINK,
    cl.SYNC_CONFIGS,
)


def _error(e: KafkaError) -> bytes:
    return cl.encode_response({"error_code": int(e.code), "error_message": e.message or error_name(int(e.code))})


def _check_link(configs: dict[str, str]) -> None:
    """A link's settings, as a create or an alter leaves them: refused with INVALID_CONFIG and a
    message naming the key when they cannot work (the TLS context and the SASL login are built
    here as the link's connections will build them: a missing trust store file, an unknown
    mechanism, a JAAS config without credentials)."""
    why = link_rules.check_link_configs(configs)
    if why:
        raise KafkaError(ErrorCode.invalid_config, why)
    try:
        source_security(configs)
    except ConfigError as e:
        raise KafkaError(ErrorCode.invalid_config, str(e)) from None


class ClusterLinkApis:
    APIS = (Api(KESQUE_CLUSTER_LINKS, 0, cl.VERSION, "cluster_links", raw=True, advertised=False),)

    def __init__(self, *, image, controllers, node_id: int, mirrors):
        """``mirrors``: the broker's MirrorFetcherManager (the lag of the partitions it leads)."""
        self.image = image
        self.controllers = controllers
        self.node_id = node_id
        self.mirrors = mirrors

    def cluster_links(self, ctx, body):
        try:
            req = cl.decode_request(body)
        except Exception as e:  # noqa: BLE001 - a body that does not parse
            return _error(KafkaError(ErrorCode.invalid_request, f"cannot parse KesqueClusterLinks: {e}"))
        op = req["operation"]
        write = op in _CHANGES
        operation = AclOperation.ALTER if write else AclOperation.DESCRIBE
        if not ctx.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME):
            return _error(KafkaError(ErrorCode.cluster_authorization_failed, "Cluster authorization failed."))
        if op == cl.LIST_LINKS:
            return self._list_links(req)
        if op == cl.DESCRIBE_MIRRORS:
            return self._describe_mirrors(req)
        if write:
            return self._change(ctx, req)
        return _error(KafkaError(ErrorCode.invalid_request, f"unknown operation {op}"))

    # ------------------------------------------------------------------ describes
    def _list_links(self, req) -> bytes:
        name = req["link_name"]
        links = [lk for lk in self.image.cluster_links.values() if name is None or lk.name == name]
        if name is not None and not links:
            return _error(KafkaError(ErrorCode.invalid_request, f"Cluster link '{name}' does not exist."))
        out = []
        for lk in sorted(links, key=lambda lk: lk.name):
            mirrors = sorted(
                self.image.topics_by_id[m.topic_id].name
                for m in self.image.mirror_topics.values()
                if m.link_id == lk.link_id and m.topic_id in self.image.topics_by_id
            )
            configs = [
                {"name": k, "value": None if link_rules.is_sensitive(k) else v, "sensitive": link_rules.is_sensitive(k)}
                for k, v in sorted(lk.configs.items())
            ]
            out.append({"link_name": lk.name, "link_id": lk.link_id, "configs": configs, "mirror_topics": mirrors})
        return cl.encode_response({"links": out})

    def _describe_mirrors(self, req) -> bytes:
        image = self.image
        names = req["topics"] or sorted(
            image.topics_by_id[tid].name for tid in image.mirror_topics if tid in image.topics_by_id
        )
        out = []
        for name in names:
            t = image.topic(name)
            m = None if t is None else image.mirror_topics.get(t.topic_id)
            if m is None:
                code = ErrorCode.unknown_topic_or_partition if t is None else ErrorCode.invalid_request
                why = f"Topic '{name}' does not exist." if t is None else f"Topic '{name}' is not a mirror topic."
                out.append({"topic": name, "error_code": int(code), "error_message": why})
                continue
            link = image.cluster_link_by_id(m.link_id)
            parts = []
            for p, reg in sorted(t.partitions.items()):
                entry = {"partition": p, "leader": reg.leader}
                local = self.mirrors.local_state(name, p) if reg.leader == self.node_id and self.mirrors else None
                if local is not None:
                    entry.update(local)
                lag = self.mirrors.lag(name, p) if reg.leader == self.node_id and self.mirrors else None
                if lag is not None:
                    entry.update(
                        log_end_offset=self.mirrors.replica_manager.partitions[(name, p)].log.log_end_offset,
                        source_high_watermark=lag.source_high_watermark,
                        lag=lag.lag,
                        time_lag_ms=lag.time_lag_ms,
                        error=lag.error,
                        lost_records=lag.lost_records,
                    )
                parts.append(entry)
            out.append(
                {
                    "topic": name,
                    "link_name": link.name if link else "",
                    "source_topic": m.source_topic,
                    "source_topic_id": m.source_topic_id,
                    "state": MIRROR_STATES.get(m.state, str(m.state)),
                    "partitions": parts,
                }
            )
        return cl.encode_response({"mirrors": out})

    # ------------------------------------------------------------------ changes, at the controller
    async def _change(self, ctx, req) -> bytes:
        try:
            if req["operation"] == cl.CREATE_LINK:
                _check_link({c["name"]: c["value"] for c in req["configs"] if c["value"] is not None})
            if req["operation"] == cl.ALTER_LINK:
                link = self.image.cluster_links.get(req["link_name"])
                if link is None:
                    raise KafkaError(ErrorCode.invalid_request, f"Cluster link '{req['link_name']}' does not exist.")
                _check_link(link_rules.altered(link.configs, {c["name"]: c["value"] for c in req["configs"]}))
            if req["operation"] == cl.CREATE_MIRROR and (req["source_topic_id"] in (None, _ZERO)):
                await self._ask_source(req)
            return await self._at_controller(req, ctx.listener in self.controllers.controller_listeners)
        except KafkaError as e:
            return _error(e)

    async def grow_mirror(self, topic: str, partitions: int) -> None:
        """This broker's own request (the mirror fetcher saw the source topic grow): the mirror
        topic to ``partitions`` partitions, at the controller. Raises KafkaError."""
        req = cl.decode_request(
            cl.encode_request({"operation": cl.GROW_MIRROR, "topics": [topic], "num_partitions": partitions})
        )
        resp = cl.decode_response_body(await self._at_controller(req, False))
        if resp["error_code"]:
            raise KafkaError(ErrorCode(resp["error_code"]), resp["error_message"] or "")

    async def sync_configs(self, topic: str, configs: dict[str, str | None]) -> None:
        """This broker's own request (the mirror fetcher of the topic's partition 0 read its
        source topic's configs): the synced configs of mirror ``topic``, at the controller."""
        req = cl.decode_request(
            cl.encode_request(
                {
                    "operation": cl.SYNC_CONFIGS,
                    "topics": [topic],
                    "configs": [{"name": k, "value": v} for k, v in sorted(configs.items())],
                }
            )
        )
        resp = cl.decode_response_body(await self._at_controller(req, False))
        if resp["error_code"]:
            raise KafkaError(ErrorCode(resp["error_code"]), resp["error_message"] or "")

    async def create_offsets_mirror(self, link_name: str, topic: str) -> None:
        """This broker's own request (its consumer-offset copier found the link's offsets mirror
        missing): ``topic`` mirrors the source's ``__consumer_offsets``, compacted as it is, at the
        controller. Raises KafkaError (TOPIC_ALREADY_EXISTS when another broker was first)."""
        req = cl.decode_request(
            cl.encode_request(
                {
                    "operation": cl.CREATE_MIRROR,
                    "link_name": link_name,
                    "topics": [topic],
                    "source_topic": offset_rules.SOURCE_OFFSETS_TOPIC,
                    "configs": [{"name": "cleanup.policy", "value": "compact"}],
                }
            )
        )
        await self._ask_source(req)
        resp = cl.decode_response_body(await self._at_controller(req, False))
        if resp["error_code"]:
            raise KafkaError(ErrorCode(resp["error_code"]), resp["error_message"] or "")

    async def _ask_source(self, req) -> None:
        """The source topic's id and partition count, over the link (a CREATE_MIRROR's)."""
        if not req["topics"] or not req["link_name"]:
            raise KafkaError(ErrorCode.invalid_request, "A mirror topic needs its name and its cluster link.")
        link = self.image.cluster_links.get(req["link_name"])
        if link is None:
            raise KafkaError(ErrorCode.invalid_request, f"Cluster link '{req['link_name']}' does not exist.")
        source_topic = req["source_topic"] or req["topics"][0]
        source = SourceCluster(link.name, link.configs, self.node_id)
        try:
            md = await source.metadata([source_topic])
        except ChannelError as e:
            raise KafkaError(
                ErrorCode.invalid_request, f"Cannot reach the source cluster of link '{link.name}': {e}"
            ) from None
        finally:
            source.close()
        err, topic_id, parts = md.get(source_topic, (int(ErrorCode.unknown_topic_or_partition), None, {}))
        if err:
            raise KafkaError(
                ErrorCode(err), f"Source topic '{source_topic}' over cluster link '{link.name}': {error_name(err)}"
            )
        req["source_topic"] = source_topic
        req["source_topic_id"] = topic_id
        req["num_partitions"] = len(parts)

    def _local(self, req):
        """The change on the local active controller (raises NOT_CONTROLLER when it is not)."""
        c = self.controllers
        op = req["operation"]
        name = req["link_name"]
        if op == cl.CREATE_LINK:
            configs = {x["name"]: x["value"] for x in req["configs"] if x["value"] is not None}
            return c.call("create_cluster_link", name, configs, req["validate_only"])
        if op == cl.DELETE_LINK:
            return c.call("delete_cluster_link", name)
        if op == cl.SYNC_CONFIGS:
            return c.call("sync_mirror_configs", req["topics"][0], {x["name"]: x["value"] for x in req["configs"]})
        if op == cl.ALTER_LINK:
            return c.call("alter_cluster_link", name, {x["name"]: x["value"] for x in req["configs"]})
        if op == cl.GROW_MIRROR:
            return c.call("grow_mirror_topic", req["topics"][0], req["num_partitions"])
        if op == cl.CREATE_MIRROR:
            configs = {x["name"]: x["value"] for x in req["configs"] if x["value"] is not None}
            return c.call(
                "create_mirror_topic",
                req["topics"][0],
                name,
                req["source_topic"],
                req["source_topic_id"],
                req["num_partitions"],
                req["replication_factor"],
                configs,
            )
        if req["mirror_op"] not in ("pause", "resume", "failover", "promote"):
            raise KafkaError(ErrorCode.invalid_request, f"unknown mirror operation {req['mirror_op']}")
        return c.call(
            "alter_mirror_topics", req["mirror_op"], list(req["topics"]), req["max_producer_id"], req["max_epoch"]
        )

    async def _at_controller(self, req, on_controller_listener: bool) -> bytes:
        c = self.controllers
        if on_controller_listener or c.local_active():
            result = await self._local(req)
            if req["operation"] == cl.ALTER_MIRRORS:
                return cl.encode_response(
                    {
                        "mirrors": [
                            {
                                "topic": t,
                                "error_code": int(e.code) if e else 0,
                                "error_message": e.message if e else None,
                            }
                            for t, e in zip(req["topics"], result)
                        ]
                    }
                )
            return cl.encode_response({})
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(req["timeout_ms"], 1) / 1000.0
        body = cl.encode_request(req)
        while True:
            if c.local_active():
                return await self._at_controller(req, False)
            leader = c.leader_id()
            if c._reachable(leader):
                try:
                    resp = await c.channel.send(
                        leader,
                        KESQUE_CLUSTER_LINKS,
                        cl.VERSION,
                        body,
                        timeout_ms=max(int((deadline - loop.time()) * 1000), 1),
                        decode=cl.decode_response,
                    )
                    if resp["error_code"] != ErrorCode.not_controller:
                        return cl.encode_response(resp)
                except ChannelError as e:
                    log.debug("KesqueClusterLinks to controller %d failed: %s", leader, e)
            if loop.time() >= deadline:
                raise KafkaError(ErrorCode.request_timed_out, "The active controller did not answer in time.")
            await asyncio.sleep(_RETRY_S)
