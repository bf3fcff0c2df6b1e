"""Server-side assignors of the KIP-848 consumer protocol: ``uniform`` (default) and ``range``.

Input: members {member_id: subscribed topic ids}, topics {topic_id: partition count}, and
the current target assignment (for stickiness). Output: {member_id: {topic_id: set(partitions)}}.
"""

from __future__ import annotations

import uuid


def uniform(members: dict[str, set[uuid.UUID]], topics: dict[uuid.UUID, int],
            current: dict[str, dict[uuid.UUID, set[int]]]) -> dict[str, dict[uuid.UUID, set[int]]]:
    """Balanced and sticky: a partition stays with its owner while the owner is subscribed
    and within its share; the rest go to the subscribed member with the fewest partitions."""
    out: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
    if not members:
        return out
    partitions = [(t, p) for t in sorted(topics, key=str) for p in range(topics[t])
                  if any(t in subs for subs in members.values())]
    counts = {m: 0 for m in members}
    # a member's fair share, counted over the partitions it can take
    share = {}
    for m, subs in members.items():
        eligible = sum(topics[t] for t in subs if t in topics)
        peers = [o for o, s in members.items() if s & subs]
        share[m] = -(-eligible // max(len(peers), 1))
    unassigned = []
    for t, p in partitions:
        owner = next((m for m, a in current.items() if p in a.get(t, ()) and m in members), None)
        if owner is not None and t in members[owner] and counts[owner] < share[owner]:
            out[owner].setdefault(t, set()).add(p)
            counts[owner] += 1
        else:
            unassigned.append((t, p))
    for t, p in unassigned:
        candidates = [m for m, subs in members.items() if t in subs]
        m = min(candidates, key=lambda x: (counts[x], x))
        out[m].setdefault(t, set()).add(p)
        counts[m] += 1
    return out


def range_(members: dict[str, set[uuid.UUID]], topics: dict[uuid.UUID, int],
           current: dict[str, dict[uuid.UUID, set[int]]]) -> dict[str, dict[uuid.UUID, set[int]]]:
    """Per topic, contiguous ranges of partitions to the subscribed members in id order."""
    out: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
    for t, n in topics.items():
        subs = sorted(m for m, s in members.items() if t in s)
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
