"""Consumer-offset copying over a cluster link, sans-IO: which groups a link copies, and when a
copy read from the source may be applied at the destination (docs/mirror.md, "Consumer offsets").

Link settings (Confluent's names):

- ``consumer.offset.sync.enable`` (``false``): copy the committed offsets of the chosen groups;
- ``consumer.offset.group.filters``: JSON, Confluent's shape, ``{"groupFilters": [{"name": N,
  "patternType": "LITERAL"|"PREFIXED", "filterType": "INCLUDE"|"EXCLUDE"}]}``; a LITERAL ``*``
  is every group; a group is copied when an INCLUDE filter matches it and no EXCLUDE filter
  does (no filters: no group);
- ``consumer.offset.sync.ms`` (30000): the interval.

**The transactional rule.** Offsets read from the source at t0 (OffsetFetch with require_stable:
no transaction holding an offset of the group is pending there) are applied only once, for every
partition mirrored over the link, the destination's last stable offset has reached the source's
high watermark read at t1 > t0. Every transaction that committed one of those offsets at the
source had written its data and its EndTxn before t0, so its markers are below that high
watermark: once the destination's LSO has passed it, the transaction's output is readable at the
destination whole. Until then the copy waits (and is kept: a newer read would only move the
target on).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..protocol import cluster_links as cl

SYNC_ENABLE = "consumer.offset.sync.enable"
GROUP_FILTERS = "consumer.offset.group.filters"
SYNC_MS = "consumer.offset.sync.ms"
DEFAULT_SYNC_MS = 30000


def sync_enabled(configs: dict[str, str]) -> bool:
    return str(configs.get(SYNC_ENABLE, "false")).strip().lower() == "true"


def sync_interval_ms(configs: dict[str, str]) -> int:
    try:
        return max(int(configs.get(SYNC_MS, DEFAULT_SYNC_MS)), 1)
    except ValueError:
        return DEFAULT_SYNC_MS


@dataclass(frozen=True)
class GroupFilter:
    name: str
    prefixed: bool
    include: bool

    def matches(self, group: str) -> bool:
        if self.prefixed:
            return group.startswith(self.name)
        return self.name == "*" or self.name == group


def parse_group_filters(text: str | None) -> list[GroupFilter]:
    """Confluent's ``consumer.offset.group.filters`` JSON; ValueError names what is wrong."""
    if not text or not text.strip():
        return []
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{GROUP_FILTERS} is not JSON: {e}") from None
    items = doc.get("groupFilters") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise ValueError(f'{GROUP_FILTERS} must be {{"groupFilters": [...]}}')
    out = []
    for f in items:
        if not isinstance(f, dict) or not isinstance(f.get("name"), str) or not f["name"]:
            raise ValueError(f"{GROUP_FILTERS}: every filter needs a name")
        pattern = str(f.get("patternType", "LITERAL")).upper()
        kind = str(f.get("filterType", "INCLUDE")).upper()
        if pattern not in ("LITERAL", "PREFIXED") or kind not in ("INCLUDE", "EXCLUDE"):
            raise ValueError(f"{GROUP_FILTERS}: patternType LITERAL|PREFIXED, filterType INCLUDE|EXCLUDE")
        out.append(GroupFilter(f["name"], pattern == "PREFIXED", kind == "INCLUDE"))
    return out


def check_offset_configs(configs: dict[str, str]) -> str | None:
    """Why a link's offset-sync settings cannot work (None when they can)."""
    try:
        parse_group_filters(configs.get(GROUP_FILTERS))
    except ValueError as e:
        return str(e)
    if SYNC_MS in configs:
        try:
            if int(configs[SYNC_MS]) <= 0:
                raise ValueError
        except ValueError:
            return f"{SYNC_MS} must be a positive number of milliseconds"
    return None


def chosen(group: str, filters: list[GroupFilter]) -> bool:
    return any(f.include and f.matches(group) for f in filters) and not any(
        not f.include and f.matches(group) for f in filters
    )


@dataclass
class OffsetCopy:
    """One round of copying: the offsets read from the source at t0, ``{group: {(destination
    topic, partition): offset}}``, and the source's high watermarks read after them, ``{(destination
    topic, partition): hw}``, for every partition mirrored over the link."""

    offsets: dict[str, dict[tuple[str, int], int]]
    source_hw: dict[tuple[str, int], int] = field(default_factory=dict)
    waited: bool = field(default=False, compare=False)  # the wait was logged

    def restricted(self, mirrored: set[tuple[str, int]]) -> OffsetCopy:
        """The copy for the partitions still mirrored over the link: a topic failed over or
        promoted meanwhile is the destination's own now, its offsets are never overwritten."""
        offsets = {g: {tp: o for tp, o in got.items() if tp in mirrored} for g, got in self.offsets.items()}
        return OffsetCopy(
            {g: got for g, got in offsets.items() if got},
            {tp: hw for tp, hw in self.source_hw.items() if tp in mirrored},
            self.waited,
        )

    def waiting_on(self, dest_lso: dict[tuple[str, int], int]) -> list[tuple[str, int, int, int]]:
        """(topic, partition, destination LSO, source HW) of each mirrored partition whose LSO at
        the destination has not reached the source's high watermark yet: the copy waits while
        there is any (an unknown LSO counts as not reached)."""
        out = []
        for tp, hw in sorted(self.source_hw.items()):
            lso = dest_lso.get(tp, -1)
            if lso < hw:
                out.append((tp[0], tp[1], lso, hw))
        return out

    def to_apply(self, group: str, dest_log_end: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """The group's offsets to commit at the destination: never past the mirror's own log end
        (after the rule held, none is)."""
        return {tp: o for tp, o in self.offsets.get(group, {}).items() if 0 <= o <= dest_log_end.get(tp, -1)}


# ---------------------------------------------------------------------------------------------
# The offsets mirror: the source's ``__consumer_offsets`` mirrored over the link (docs/mirror.md,
# "Exactly once across a failover")

SOURCE_OFFSETS_TOPIC = "__consumer_offsets"
offsets_mirror_topic = cl.offsets_mirror_topic


class OffsetLogReplay:
    """The committed offsets a ``__consumer_offsets`` partition holds, replayed as its group
    coordinator loads it: a plain OffsetCommit record applies at once, a transactional one
    (sendOffsetsToTransaction) waits for its producer's marker, applied on COMMIT, dropped on ABORT;
    a tombstone deletes. A transaction with no marker at the end is not applied: at a failover its
    records are aborted wherever they were mirrored (the same decision as the leaders' ABORT
    markers on the failed-over partitions, so offsets and output agree).

    Fed in log order, one partition at a time (``marker`` only applies to that partition's
    pending records: each instance replays one partition)."""

    def __init__(self) -> None:
        # {group: {(topic, partition): (offset, leader epoch, metadata)}}
        self.offsets: dict[str, dict[tuple[str, int], tuple[int, int, str]]] = {}
        self.pending: dict[int, list[tuple[str, tuple[str, int], tuple[int, int, str] | None]]] = {}
        self.records = 0

    def commit(self, producer_id: int, group: str, tp: tuple[str, int], value: tuple[int, int, str] | None) -> None:
        """An OffsetCommit record (``value`` None: its tombstone); ``producer_id`` -1 when the
        batch was not transactional."""
        self.records += 1
        if producer_id >= 0:
            self.pending.setdefault(producer_id, []).append((group, tp, value))
        else:
            self._apply(group, tp, value)

    def marker(self, producer_id: int, commit: bool) -> None:
        for group, tp, value in self.pending.pop(producer_id, ()):
            if commit:
                self._apply(group, tp, value)

    def _apply(self, group: str, tp: tuple[str, int], value: tuple[int, int, str] | None) -> None:
        if value is None:
            self.offsets.get(group, {}).pop(tp, None)
        else:
            self.offsets.setdefault(group, {})[tp] = value

    def open_transactions(self) -> int:
        return sum(1 for v in self.pending.values() if v)
