"""The consumer offsets a failover or a promotion applies (``kesque mirrors --failover/--promote``;
docs/mirror.md, "Exactly once across a failover").

A link with ``consumer.offset.sync.enable=true`` mirrors the source's ``__consumer_offsets`` into
its offsets mirror (:func:`kesque.protocol.cluster_links.offsets_mirror_topic`), byte for byte,
markers included, as any mirror topic. When topics of the link end their mirroring, the tool reads
that mirror from its start to its end (read_uncommitted, control batches included) and replays it
as a group coordinator loads its partition (:class:`kesque.mirror.offsets.OffsetLogReplay`): the
last offset each chosen group committed on each partition of those topics, a transactional commit
counted only once its COMMIT marker is there. It then commits those offsets at the destination
(an OffsetCommit of the admin client: refused for a group with members there), so a pipeline that
resumes there starts exactly after the input whose output the destination holds.
"""

from __future__ import annotations

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition

from ..client.consumer import EARLIEST, LATEST, WireConsumer
from ..coordinator.group import records as group_records
from ..mirror import offsets as rules
from ..records import batch as rb
from ..records.records import CONTROL_COMMIT, iter_records, read_end_txn_marker
from .cluster_links import security_of
from .plumbing.admin_client import make_admin

_OFFSET_KEYS = (0, 1)  # OffsetCommit key versions


class _BatchReader(WireConsumer):
    """Every batch of the assigned partitions, control batches and open transactions included."""

    def _decode(self, st, data: bytes, aborted) -> list:
        out = []
        for pos, h in rb.iter_headers(data):
            if h.last_offset < st.position:
                continue
            if h.magic == rb.MAGIC_V2:
                out.append((st.partition, h, data, pos))
            st.position = h.next_offset
        return out


def read_offsets_mirror(bootstrap: str, topic: str, timeout: float = 30.0) -> dict[int, rules.OffsetLogReplay]:
    """{partition: its replay} of the offsets mirror ``topic``, read from its log start to the
    log end it had when the read began."""
    reader = _BatchReader(
        bootstrap, client_id="kesque-mirrors", max_wait_ms=100, timeout=timeout, client_props=security_of(bootstrap)
    )
    try:
        md = reader.metadata([topic]).get(topic, {})
        parts = sorted(md.get("partitions", {}))
        tps = [(topic, p) for p in parts]
        if not tps:
            return {}
        ends = reader.list_offsets(tps, LATEST)
        reader.assign({tp: EARLIEST for tp in tps})
        replays = {p: rules.OffsetLogReplay() for p in parts}
        todo = {tp for tp in tps if reader.assignment[tp].position < ends.get(tp, 0)}
        idle = 0
        while todo:
            got = reader.poll(1.0)
            idle = 0 if got else idle + 1
            if idle > timeout:
                raise TimeoutError(f"{topic}: no progress reading {sorted(todo)}")
            for partition, h, data, pos in got:
                _replay_batch(replays[partition], h, data, pos)
            todo = {tp for tp in todo if reader.assignment[tp].position < ends.get(tp, 0)}
        return replays
    finally:
        reader.close()


def _replay_batch(replay: rules.OffsetLogReplay, h, data: bytes, pos: int) -> None:
    if h.is_control:
        marker = read_end_txn_marker(memoryview(data)[pos : pos + h.size], h)
        if marker is not None:
            replay.marker(h.producer_id, marker[0] == CONTROL_COMMIT)
        return
    pid = h.producer_id if h.is_transactional else -1
    for r in iter_records(data, pos, h):
        if r.key is None:
            continue
        try:
            version, key = group_records.decode_key(r.key)
            if version not in _OFFSET_KEYS:
                continue
            value = group_records.decode_value(version, r.value)
        except (ValueError, IndexError):
            continue  # a record type this version does not know: not an offset
        tp = (key["topic"], int(key["partition"]))
        if value is None:
            replay.commit(pid, key["group"], tp, None)
        else:
            epoch = int(value.get("leader_epoch", -1))
            replay.commit(pid, key["group"], tp, (int(value["offset"]), epoch, value.get("metadata") or ""))


def offsets_to_apply(
    replays: dict[int, rules.OffsetLogReplay], filters: list[rules.GroupFilter], topics: dict[str, str]
) -> dict[str, dict[tuple[str, int], tuple[int, int, str]]]:
    """{group: {(destination topic, partition): (offset, leader epoch, metadata)}} of the chosen
    groups, for the source topics in ``topics`` ({source topic: mirror topic})."""
    out: dict[str, dict] = {}
    for replay in replays.values():
        for group, offsets in replay.offsets.items():
            if not rules.chosen(group, filters):
                continue
            for (t, p), v in offsets.items():
                if t in topics:
                    out.setdefault(group, {})[(topics[t], p)] = v
    return out


def apply_offsets(bootstrap: str, offsets: dict[str, dict[tuple[str, int], tuple[int, int, str]]]) -> list[str]:
    """Commit each group's offsets at the destination; one line per group for the tool's output."""
    if not offsets:
        return []
    admin = make_admin(bootstrap, client_id="kesque-mirrors")
    lines = []
    for group, got in sorted(offsets.items()):
        tps = []
        for (t, p), (o, e, m) in sorted(got.items()):
            extra = {"metadata": m} if m else {}
            if e >= 0:
                extra["leader_epoch"] = e
            tps.append(TopicPartition(t, p, o, **extra))
        try:
            (fut,) = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)]).values()
            res = fut.result(30)
            bad = [tp for tp in res.topic_partitions if tp.error]
            if bad:
                raise KafkaException(bad[0].error)
        except KafkaException as e:
            lines.append(f"Group: {group}\tError: consumer offsets not applied: {e.args[0]}")
            continue
        where = ", ".join(f"{t}-{p}:{o}" for (t, p), (o, _e, _m) in sorted(got.items()))
        lines.append(f"Group: {group}\tConsumer offsets applied: {where}")
    return lines
