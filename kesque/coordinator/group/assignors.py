"""Server-side assignors of the KIP-848 consumer protocol: ``uniform`` (default) and ``range``.

Input: members {member_id: subscribed topic ids}, topics {topic_id: partition count}, the
current target assignment (for stickiness) and, optionally, the members' instance ids.
Output: {member_id: {topic_id: set(partitions)}}.
"""

from __future__ import annotations

import uuid

Assignment = dict[uuid.UUID, set[int]]


def _owned(current: dict[str, Assignment], member: str, subs: set, topics: dict[uuid.UUID, int]) -> list:
    """The member's current partitions it may keep: subscribed topics, existing partitions."""
    return sorted(
        ((t, p) for t, ps in current.get(member, {}).items() if t in subs and t in topics for p in ps if p < topics[t]),
        key=lambda tp: (str(tp[0]), tp[1]),
    )


def uniform(
    members: dict[str, set[uuid.UUID]],
    topics: dict[uuid.UUID, int],
    current: dict[str, Assignment],
    instance_ids: dict[str, str | None] | None = None,
) -> dict[str, Assignment]:
    """Balanced and sticky. With every member subscribed to the same topics (the common
    case) each member gets ``total // n`` partitions and ``total % n`` of them one more, and
    an owner keeps what it has up to that quota (Kafka's UniformHomogeneousAssignmentBuilder).
    With different subscriptions, an owner keeps up to its fair share among the members it
    competes with and the rest go to the eligible member with the fewest partitions."""
    out: dict[str, Assignment] = {m: {} for m in members}
    if not members:
        return out
    subscriptions = {frozenset(t for t in s if t in topics) for s in members.values()}
    if len(subscriptions) == 1:
        _uniform_homogeneous(members, topics, current, out, next(iter(subscriptions)))
    else:
        _uniform_heterogeneous(members, topics, current, out)
    return out


def _uniform_homogeneous(members, topics, current, out, subs) -> None:
    order = sorted(members)
    total = sum(topics[t] for t in subs)
    min_quota, extra = divmod(total, len(members))
    taken: set = set()
    counts = dict.fromkeys(order, 0)
    for m in order:  # stickiness: keep up to the quota; owners above it may keep one extra
        owned = _owned(current, m, subs, topics)
        keep = min(len(owned), min_quota)
        if len(owned) > min_quota and extra > 0:
            keep += 1
            extra -= 1
        for t, p in owned[:keep]:
            out[m].setdefault(t, set()).add(p)
            taken.add((t, p))
        counts[m] = keep
    free = [(t, p) for t in sorted(subs, key=str) for p in range(topics[t]) if (t, p) not in taken]
    i = 0
    for m in order:  # fill everyone to the minimum quota
        while counts[m] < min_quota:
            t, p = free[i]
            i += 1
            out[m].setdefault(t, set()).add(p)
            counts[m] += 1
    for m in order:  # what is left: one more each, while extras remain
        if i >= len(free):
            break
        if counts[m] == min_quota and extra > 0:
            t, p = free[i]
            i += 1
            out[m].setdefault(t, set()).add(p)
            counts[m] += 1
            extra -= 1


def _uniform_heterogeneous(members, topics, current, out) -> None:
    counts = dict.fromkeys(members, 0)
    share = {}
    for m, subs in members.items():
        eligible = sum(topics[t] for t in subs if t in topics)
        peers = [o for o, s in members.items() if s & subs]
        share[m] = -(-eligible // max(len(peers), 1))
    taken: set = set()
    for m in sorted(members):
        for t, p in _owned(current, m, members[m], topics)[: share[m]]:
            if (t, p) not in taken:
                out[m].setdefault(t, set()).add(p)
                taken.add((t, p))
                counts[m] += 1
    for t in sorted(topics, key=str):
        candidates = [m for m, subs in members.items() if t in subs]
        if not candidates:
            continue
        for p in range(topics[t]):
            if (t, p) in taken:
                continue
            m = min(candidates, key=lambda x: (counts[x], x))
            out[m].setdefault(t, set()).add(p)
            counts[m] += 1


def _range_order(members, instance_ids: dict[str, str | None] | None) -> list[str]:
    """Members with an instance id first, by instance id, then the others by member id
    (Kafka's RangeAssignor.sortMemberIds), so a restarted static member gets its ranges back."""
    ids = instance_ids or {}
    return sorted(members, key=lambda m: (0, ids[m], m) if ids.get(m) is not None else (1, "", m))


def range_(
    members: dict[str, set[uuid.UUID]],
    topics: dict[uuid.UUID, int],
    current: dict[str, Assignment],
    instance_ids: dict[str, str | None] | None = None,
) -> dict[str, Assignment]:
    """Per topic, contiguous ranges of partitions to the subscribed members in order."""
    out: dict[str, Assignment] = {m: {} for m in members}
    order = _range_order(members, instance_ids)
    for t, n in topics.items():
        subs = [m for m in order if t in members[m]]
        if not subs:
            continue
        per, extra = divmod(n, len(subs))
        start = 0
        for i, m in enumerate(subs):
            k = per + (1 if i < extra else 0)
            if k:
                out[m][t] = set(range(start, start + k))
            start += k
    return out


ASSIGNORS = {"uniform": uniform, "range": range_}
