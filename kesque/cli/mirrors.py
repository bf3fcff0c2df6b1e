"""``kesque mirrors``: create, describe, pause and resume mirror topics, with the names and flags of
Confluent's ``kafka-mirrors`` (docs/mirror.md)::

    kesque mirrors --bootstrap-server DEST --create --mirror-topic T --link NAME [--source-topic S]
    kesque mirrors --bootstrap-server DEST --describe [--topics T1,T2] [--links NAME]
    kesque mirrors --bootstrap-server DEST --list [--links NAME]
    kesque mirrors --bootstrap-server DEST --pause|--resume|--failover|--promote --topics T1,T2

``--describe`` asks every broker of the destination, since the lag of a mirror partition is
known to its leader: one line per topic, then one per partition with its log end, the source's
high watermark at the last fetch, the lag in offsets and in time, and the last fetch error.
``--failover`` stops the mirroring and makes the topics writable now (their partitions' leaders
abort the transactions the source left open); ``--promote`` does the same once the mirror has
caught up with its source and no source transaction is open (docs/mirror.md).
"""

from __future__ import annotations

import argparse
import sys
import time

from ..client.wire import AuthenticationError, Connection, WireError
from ..errors import error_name
from ..mirror import offsets as rules
from ..protocol import cluster_links as cl
from ..protocol.api_keys import ApiKeys
from ..storage.checkpoint import uuid_to_kafka
from . import mirror_offsets
from .cluster_links import ToolError, call, security_of, use_command_config
from .plumbing.errors import error_line


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kesque mirrors", description="Create, describe, pause, resume, fail over and promote mirror topics."
    )
    p.add_argument("--bootstrap-server", required=True, help="REQUIRED: the destination cluster's server(s)")
    p.add_argument("--command-config", help="Property file of the client settings to reach the destination with.")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--create", action="store_true", help="Create a mirror topic.")
    action.add_argument("--describe", action="store_true", help="Describe mirror topics and their lag.")
    action.add_argument("--list", action="store_true", help="List the mirror topics.")
    action.add_argument("--pause", action="store_true", help="Stop fetching the topics from the source.")
    action.add_argument("--resume", action="store_true", help="Fetch the paused topics again.")
    action.add_argument("--promote", action="store_true", help="Make the topics writable once caught up.")
    action.add_argument("--failover", action="store_true", help="Stop mirroring and make the topics writable now.")
    p.add_argument("--mirror-topic", help="The mirror topic to create.")
    p.add_argument("--source-topic", help="The topic it mirrors (default: the same name).")
    p.add_argument("--link", help="The cluster link of the new mirror topic.")
    p.add_argument("--links", help="Only the mirror topics of these links (comma-separated).")
    p.add_argument("--topics", help="The mirror topics (comma-separated).")
    p.add_argument("--replication-factor", type=int, default=-1, help="The mirror topic's replication factor.")
    p.add_argument("--config", help="Topic configs of the mirror topic as key=value[,key=value].")
    return p


def _names(s: str | None) -> list[str]:
    return [x.strip() for x in (s or "").split(",") if x.strip()]


def brokers(bootstrap: str) -> tuple[Connection, dict[int, tuple[str, int]]]:
    conn = Connection.to_any(bootstrap, client_id="kesque-mirrors", security=security_of(bootstrap))
    md = conn.request(
        ApiKeys.METADATA,
        lambda mod, v: mod.request.MetadataRequest(
            topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False
        ),
        max_version=12,
    )
    return conn, {int(b.node_id): (b.host, int(b.port)) for b in md.brokers}


def describe(bootstrap: str, topics: list[str]) -> list[dict]:
    """The mirror topics with each partition's lag from its leader."""
    try:
        conn, nodes = brokers(bootstrap)
    except (OSError, WireError) as e:
        raise ToolError(f"Error while talking to {bootstrap}: {e}") from None
    req = {"operation": cl.DESCRIBE_MIRRORS, "topics": topics}
    try:
        mirrors = call(bootstrap, req, conn)["mirrors"]
    finally:
        conn.close()
    answers = {}
    for node, (host, port) in nodes.items():
        try:
            with Connection(host, port, client_id="kesque-mirrors", security=security_of(bootstrap)) as c:
                answers[node] = {m["topic"]: m for m in call(bootstrap, req, c)["mirrors"]}
        except (ToolError, OSError, WireError):
            answers[node] = {}
    for m in mirrors:
        for i, p in enumerate(m["partitions"]):
            theirs = answers.get(p["leader"], {}).get(m["topic"])
            if theirs is not None:
                m["partitions"][i] = next((x for x in theirs["partitions"] if x["partition"] == p["partition"]), p)
    return mirrors


def _alter(bootstrap: str, op: str, topic: str, **extra) -> dict:
    (m,) = call(bootstrap, {"operation": cl.ALTER_MIRRORS, "mirror_op": op, "topics": [topic], **extra})["mirrors"]
    return m


def _stopped(bootstrap: str, topics: list[str], deadline: float, also: list[str]) -> dict[str, dict]:
    """Pause ``topics`` with ``also`` (their links' offsets mirrors) in one request, so one
    metadata batch: a broker's fetcher drops them all at the same refresh, no round appends to one
    and not the others. Then wait until no broker copies any of them; {topic: its describe}."""
    resp = call(bootstrap, {"operation": cl.ALTER_MIRRORS, "mirror_op": "pause", "topics": [*topics, *also]})
    for m in resp["mirrors"][: len(topics)]:
        if m["error_code"] and "is PAUSED" not in (m["error_message"] or ""):
            raise ToolError(f"{m['topic']}: {m['error_message'] or error_name(m['error_code'])}")
    while True:
        described = describe(bootstrap, [*topics, *also])
        if not any(p["fetching"] for d in described if not d["error_code"] for p in d["partitions"]):
            return {d["topic"]: d for d in described}
        if time.monotonic() > deadline:
            raise ToolError(f"the partitions of {', '.join(topics)} are still being copied")
        time.sleep(0.1)


def _seen_by_every_broker(bootstrap: str, topic: str, deadline: float) -> None:
    """Wait until every broker's metadata has ``topic`` out of mirroring: a consumer-offset copier
    whose broker still saw it mirrored could otherwise overwrite the offsets applied next."""
    _conn, nodes = brokers(bootstrap)
    _conn.close()
    req = {"operation": cl.DESCRIBE_MIRRORS, "topics": [topic]}
    for host, port in nodes.values():
        while True:
            try:
                with Connection(host, port, client_id="kesque-mirrors", security=security_of(bootstrap)) as c:
                    (m,) = call(bootstrap, req, c)["mirrors"]
                if m["state"] in ("FAILED_OVER", "PROMOTED"):
                    break
            except (ToolError, OSError, WireError):
                break  # a broker that does not answer copies nothing
            if time.monotonic() > deadline:
                raise ToolError(f"broker {host}:{port} still has {topic} mirroring")
            time.sleep(0.05)


def _offsets_mirrors(bootstrap: str, links: set[str]) -> tuple[dict[str, str], list[str]]:
    """({link: its offsets mirror} of the links that have one still mirroring, [those ACTIVE])."""
    out, active = {}, []
    for link in sorted(links):
        name = cl.offsets_mirror_topic(link)
        (om,) = call(bootstrap, {"operation": cl.DESCRIBE_MIRRORS, "topics": [name]})["mirrors"]
        if not om["error_code"] and om["state"] in ("ACTIVE", "PAUSED"):
            out[link] = name
            if om["state"] == "ACTIVE":
                active.append(name)
    return out, active


def end_mirroring(bootstrap: str, topics: list[str] | str, op: str, timeout: float = 60.0) -> int:
    """``failover``: pause the topics, wait until no broker copies them any more, then make each
    writable with the highest producer id and leader epoch its partitions' logs hold (docs/mirror.md).
    ``promote``: the same once every partition has caught up with its source, with no source
    transaction open (refused when that does not happen within ``timeout``). The topics stop
    together, with their links' offsets mirrors (the source's ``__consumer_offsets``); the chosen
    groups' offsets on the topics are then replayed from those and applied
    (:mod:`.mirror_offsets`). 1 when any failed."""
    topics = [topics] if isinstance(topics, str) else list(topics)
    deadline = time.monotonic() + timeout
    failed = 0
    described = {m["topic"]: m for m in describe(bootstrap, topics)}
    ok = []
    for t in topics:
        m = described.get(t)
        if m is None or m["error_code"]:
            failed += 1
            print(f"Topic: {t}\tError: {(m or {}).get('error_message') or 'not a mirror topic'}")
        elif m["state"] not in ("ACTIVE", "PAUSED"):  # the controller's answer, without pausing the others
            failed += 1
            print(f"Topic: {t}\tError: Mirror topic '{t}' is {m['state']}: it cannot {op}.")
        else:
            ok.append(t)
    if not ok:
        return 1
    offsets_mirrors, resume = _offsets_mirrors(bootstrap, {described[t]["link_name"] for t in ok})
    also = sorted(offsets_mirrors.values())
    done, lines = [], []
    try:
        while True:
            if op == "promote":
                while not all(p["caught_up"] for m in describe(bootstrap, ok) for p in m["partitions"]):
                    if time.monotonic() > deadline:
                        lags = {m["topic"]: [p["lag"] for p in m["partitions"]] for m in describe(bootstrap, ok)}
                        raise ToolError(
                            f"{', '.join(ok)} has not caught up with its source within {timeout:.0f} s (lag "
                            f"{lags}, or a source transaction is open): not promoted"
                        )
                    time.sleep(0.1)
            stopped = _stopped(bootstrap, ok, deadline, also)
            if op != "promote" or all(p["caught_up"] for t in ok for p in stopped[t]["partitions"]):
                break
            for t in [*ok, *resume]:  # the source moved on meanwhile: catch up again
                _alter(bootstrap, "resume", t)
        for t in ok:
            parts = stopped[t]["partitions"]
            m = _alter(
                bootstrap,
                op,
                t,
                max_producer_id=max((p["max_producer_id"] for p in parts), default=-1),
                max_epoch=max((p["latest_epoch"] for p in parts), default=-1),
            )
            if m["error_code"]:
                failed += 1
                print(f"Topic: {t}\tError: {m['error_message'] or error_name(m['error_code'])}")
            else:
                done.append(t)
        if offsets_mirrors and done:
            for t in done:
                _seen_by_every_broker(bootstrap, t, deadline)
            lines = _apply_mirrored_offsets(bootstrap, offsets_mirrors, [described[t] for t in done])
    except ToolError as e:
        for t in ok:
            if t not in done:
                if op == "promote":
                    _alter(bootstrap, "resume", t)  # a promotion that did not happen leaves it mirroring
                print(f"Topic: {t}\tError: {e}")
        failed += len(ok) - len(done)
    finally:
        for name in resume:
            _alter(bootstrap, "resume", name)
    for t in done:
        print(f"Topic: {t}\tResult: {'Promoted' if op == 'promote' else 'Failed over'}")
    for line in lines:
        print(line)
    return 1 if failed else 0


def _apply_mirrored_offsets(bootstrap: str, offsets_mirrors: dict[str, str], mirrors: list[dict]) -> list[str]:
    """Replay each link's offsets mirror and apply its chosen groups' offsets of ``mirrors``."""
    lines = []
    for link_name, name in sorted(offsets_mirrors.items()):
        topics = {m["source_topic"]: m["topic"] for m in mirrors if m["link_name"] == link_name}
        if not topics:
            continue
        (lk,) = call(bootstrap, {"operation": cl.LIST_LINKS, "link_name": link_name})["links"]
        configs = {c["name"]: c["value"] for c in lk["configs"]}
        filters = rules.parse_group_filters(configs.get(rules.GROUP_FILTERS))
        try:
            replays = mirror_offsets.read_offsets_mirror(bootstrap, name)
        except (OSError, WireError, TimeoutError) as e:
            raise ToolError(f"cannot read the offsets mirror {name}: {e}") from None
        lines += mirror_offsets.apply_offsets(bootstrap, mirror_offsets.offsets_to_apply(replays, filters, topics))
    return lines


def _value(x: int) -> str:
    return "-" if x < 0 else str(x)


def run(a) -> int:
    if a.promote or a.failover:
        op = "promote" if a.promote else "failover"
        topics = _names(a.topics)
        if not topics:
            raise ToolError(f"--topics is required with --{op}")
        return end_mirroring(a.bootstrap_server, topics, op)
    if a.create:
        if not a.mirror_topic or not a.link:
            raise ToolError("--mirror-topic and --link are required with --create")
        configs = []
        for item in _names(a.config):
            k, sep, v = item.partition("=")
            if not sep:
                raise ToolError(f"Invalid config: {item} (expected key=value)")
            configs.append({"name": k, "value": v})
        req = {
            "operation": cl.CREATE_MIRROR,
            "link_name": a.link,
            "topics": [a.mirror_topic],
            "source_topic": a.source_topic,
            "replication_factor": a.replication_factor,
            "configs": configs,
        }
        call(a.bootstrap_server, req)
        print(f"Created topic {a.mirror_topic}.")
        return 0
    if a.pause or a.resume:
        topics = _names(a.topics)
        if not topics:
            raise ToolError("--topics is required with --pause and --resume")
        op = "pause" if a.pause else "resume"
        resp = call(a.bootstrap_server, {"operation": cl.ALTER_MIRRORS, "mirror_op": op, "topics": topics})
        failed = 0
        for m in resp["mirrors"]:
            if m["error_code"]:
                failed += 1
                print(f"Topic: {m['topic']}\tError: {m['error_message'] or error_name(m['error_code'])}")
            else:
                print(f"Topic: {m['topic']}\tResult: {'Paused' if a.pause else 'Resumed'}")
        return 1 if failed else 0
    links = set(_names(a.links))
    if a.list:
        resp = call(a.bootstrap_server, {"operation": cl.DESCRIBE_MIRRORS, "topics": _names(a.topics)})
        for m in resp["mirrors"]:
            if not m["error_code"] and (not links or m["link_name"] in links):
                print(m["topic"])
        return 0
    failed = 0
    for m in describe(a.bootstrap_server, _names(a.topics)):
        if m["error_code"]:
            failed += 1
            print(f"Topic: {m['topic']}\tError: {m['error_message'] or error_name(m['error_code'])}")
            continue
        if links and m["link_name"] not in links:
            continue
        print(
            f"Topic: {m['topic']}\tLinkName: {m['link_name']}\tSourceTopic: {m['source_topic']}\t"
            f"SourceTopicId: {uuid_to_kafka(m['source_topic_id'])}\tState: {m['state']}\t"
            f"NumPartitions: {len(m['partitions'])}"
        )
        for p in m["partitions"]:
            print(
                f"\tPartition: {p['partition']}\tLeader: {p['leader']}\t"
                f"DestLogEndOffset: {_value(p['log_end_offset'])}\t"
                f"LastFetchSourceHighWatermark: {_value(p['source_high_watermark'])}\t"
                f"Lag: {_value(p['lag'])}\tTimeLagMs: {_value(p['time_lag_ms'])}\t"
                f"LostRecords: {p['lost_records']}\tError: {p['error'] or '-'}"
            )
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    a = build_parser().parse_args(argv)
    try:
        use_command_config(a.bootstrap_server, a.command_config)
        return run(a)
    except AuthenticationError as e:
        sys.stdout.flush()
        print(f"Error: Error while talking to {a.bootstrap_server}: {error_line(e)}", file=sys.stderr)
        return 1
    except (ToolError, OSError, ValueError) as e:
        sys.stdout.flush()
        print(f"Error: {e}", file=sys.stderr)
        return 1
