"""The StandardAuthorizer's cost per check (issue 27: "small-request rate with an authorizer
holding 10,000 ACLs against none", bar 90%). Standalone, in-process, asserts nothing: checks/s
of ``StandardAuthorizer.authorize`` (the server's seam: a request context in) with no ACLs and
with 10,000 (per-user LITERAL topic ACLs, PREFIXED ones, group ACLs, a few wildcards and DENYs,
as a multi-tenant cluster has them), for a topic the principal may write, one it may not, and
one with no ACL of its own (the groups found for a name are cached: the index is walked again
with that cache cleared); and, to show what the sorted prefix index buys, the same checks by
a scan of every ACL (what an index-less authorizer does). The request-path figure is derived,
not measured: the share of a small-request rate (``--request-rate``, one check a request) kept
when each request pays this check instead of the no-ACL one; the measured figure needs the
authorizer wired into the broker.

    python bench/authorizer.py [--acls 10000] [--seconds 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from types import SimpleNamespace

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path[:0] = [ROOT]

from kesque.security.acl import AclOperation, AclPermissionType, PatternType, ResourceType  # noqa: E402
from kesque.security.authorizer import StandardAcl, StandardAuthorizer  # noqa: E402
from kesque.security.principal import KafkaPrincipal  # noqa: E402

Op, T, G = AclOperation, ResourceType.TOPIC, ResourceType.GROUP
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


def many_acls(n: int) -> list[StandardAcl]:
    acls = [
        StandardAcl(T, "*", LIT, "User:admin", "*", Op.ALL, ALLOW),
        StandardAcl(T, "secret", PRE, "User:*", "*", Op.ALL, DENY),
        StandardAcl(G, "*", LIT, "User:*", "*", Op.READ, ALLOW),
    ]
    i = 0
    while len(acls) < n:
        tenant, user = f"tenant{i % 200:03d}", f"User:app{i}"
        acls.append(StandardAcl(T, f"{tenant}.orders.{i}", LIT, user, "*", Op.WRITE, ALLOW))
        acls.append(StandardAcl(T, f"{tenant}.events.{i}", LIT, user, "*", Op.READ, ALLOW))
        acls.append(StandardAcl(T, f"{tenant}.shared.", PRE, user, "*", Op.READ, ALLOW))
        acls.append(StandardAcl(G, f"{tenant}-group-{i}", LIT, user, "*", Op.READ, ALLOW))
        i += 1
    return acls[:n]


def rate(fn, seconds: float) -> float:
    """Calls of ``fn`` per second, best of three passes."""
    best = 0.0
    for _ in range(3):
        n, t0 = 0, time.perf_counter()
        deadline = t0 + seconds / 3
        while True:
            for _ in range(1000):
                fn()
            n += 1000
            now = time.perf_counter()
            if now >= deadline:
                break
        best = max(best, n / (now - t0))
    return best


def scan(acls, principal, host, op, rt, name) -> bool:
    """An authorizer without an index: every ACL looked at."""
    who, allowed, found = str(principal), False, False
    for a in acls:
        if a.resource_type != rt:
            continue
        if a.pattern_type == LIT and a.resource_name not in (name, "*"):
            continue
        if a.pattern_type == PRE and not name.startswith(a.resource_name):
            continue
        found = True
        if a.principal not in (who, "User:*") or a.host not in ("*", host) or a.operation not in (op, Op.ALL):
            continue
        if a.permission_type == DENY:
            return False
        allowed = True
    return allowed if found else False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--acls", type=int, default=10_000)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument(
        "--request-rate",
        type=float,
        default=30_000,
        help="a small-request rate to relate a check's cost to (one check a request), req/s",
    )
    args = ap.parse_args()
    acls = many_acls(args.acls)
    full = StandardAuthorizer()
    for i, acl in enumerate(acls):
        full.add_acl(i, acl)
    section = full._sections[T]
    empty = StandardAuthorizer(allow_everyone_if_no_acl_found=True)
    ctx = SimpleNamespace(principal=KafkaPrincipal("User", "app7"), client_host="10.0.0.7")
    cases = {
        "allowed (LITERAL WRITE)": "tenant007.orders.7",
        "allowed (PREFIXED READ)": "tenant007.shared.x",
        "denied (others' ACLs)": "tenant008.orders.8",
        "no ACL of its own": "unrelated-topic",
    }
    ops = {"allowed (LITERAL WRITE)": Op.WRITE}
    base = rate(lambda: empty.authorize(ctx, Op.WRITE, T, "tenant007.orders.7"), args.seconds)
    print(f"{args.acls} ACLs; checks/s of StandardAuthorizer.authorize (best of 3)")
    print(f"  {'no ACLs':<28} {base:>12,.0f}/s  {1e6 / base:5.2f} µs")
    for label, name in cases.items():
        op = ops.get(label, Op.READ)
        r = rate(lambda: full.authorize(ctx, op, T, name), args.seconds)
        u = rate(lambda: (section.found.clear(), full.authorize(ctx, op, T, name)), args.seconds)
        s = rate(lambda: scan(acls, ctx.principal, ctx.client_host, op, T, name), min(args.seconds, 0.3))
        kept = (1 / args.request_rate + 1 / base) / (1 / args.request_rate + 1 / r)
        print(
            f"  {label:<28} {r:>12,.0f}/s  {1e6 / r:5.2f} µs  {kept:6.1%} of a {args.request_rate:,.0f} req/s path"
            f"   (uncached, the index walked: {u:,.0f}/s; a scan of every ACL: {s:,.0f}/s)"
        )


if __name__ == "__main__":
    main()
