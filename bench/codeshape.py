"""The shape of kesque's code, as issue 26 counts it: reaches into the server object, package
cycles, in-function imports, asyncio lines in domain packages, largest files and lines of code.

    python bench/codeshape.py            # a table
    python bench/codeshape.py --json     # the same figures, for notes and comparisons

Everything is read with Python's ``ast``; nothing is imported, so it runs on any source tree
(``--root`` another checkout to compare two trees).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
from collections import Counter, defaultdict

# the packages whose modules docs/architecture.md and ../shared/DESIGN.md call sans-IO cores
DOMAIN = ("storage", "metadata", "controller", "replication", "coordinator", "share", "raft", "records", "protocol")
# where the server object is built and wired: its own reaches are not counted
WIRING = {"kesque/server/server.py"}
SERVER_NAMES = {"server", "_server"}


def modules(root: str):
    base = os.path.join(root, "kesque")
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for f in sorted(filenames):
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                yield os.path.relpath(path, root).replace(os.sep, "/"), path


def module_name(rel: str) -> str:
    parts = rel[:-3].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def package_of(name: str) -> str:
    """kesque.server.apis.core -> server; kesque.utils -> utils (top-level modules count as packages)."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def resolve(current: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = current.split(".")
    if not is_pkg:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports(rel: str, tree: ast.Module):
    """(target module, lineno, inside a function) for every import of a kesque module."""
    name = module_name(rel)
    is_pkg = rel.endswith("__init__.py")
    func_depth = {}

    def walk(node, in_func):
        for child in ast.iter_child_nodes(node):
            inside = in_func or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for a in child.names:
                    yield a.name, child.lineno, in_func
            elif isinstance(child, ast.ImportFrom):
                target = resolve(name, is_pkg, child)
                yield target, child.lineno, in_func
                for a in child.names:  # from . import quotas: the submodule is the target
                    func_depth[(child.lineno, a.name)] = target + "." + a.name
            yield from walk(child, inside)

    yield from walk(tree, False)


def in_function_imports(tree: ast.Module) -> int:
    count = 0

    def walk(node, in_func):
        nonlocal count
        for child in ast.iter_child_nodes(node):
            if in_func and isinstance(child, (ast.Import, ast.ImportFrom)):
                count += 1
            walk(child, in_func or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    walk(tree, False)
    return count


def server_reaches(tree: ast.Module) -> Counter:
    """Attribute reads on the server object: ``server.x``, ``self.server.x``, ``self._server.x``
    anywhere (methods, lambdas, properties), and on a function's local aliases of those
    (``s = self.server``)."""
    found = Counter()

    def is_server(expr) -> bool:
        if isinstance(expr, ast.Name):
            return expr.id in SERVER_NAMES
        return (
            isinstance(expr, ast.Attribute)
            and expr.attr in SERVER_NAMES
            and isinstance(expr.value, ast.Name)
            and expr.value.id == "self"
        )

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_server(node.value) and node.attr not in SERVER_NAMES:
            found[node.attr] += 1
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            aliases = {
                n.targets[0].id
                for n in ast.walk(node)
                if isinstance(n, ast.Assign)
                and len(n.targets) == 1
                and isinstance(n.targets[0], ast.Name)
                and n.targets[0].id not in SERVER_NAMES
                and is_server(n.value)
            }
            for n in ast.walk(node):
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in aliases:
                    found[n.attr] += 1
    return found


def cycles(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Pairs of packages that import each other, directly or through others (one pair per
    strongly connected component member pair that has a direct edge)."""
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            comps.append(comp)

    sys.setrecursionlimit(10_000)
    for v in sorted(edges):
        if v not in index:
            strong(v)
    pairs = []
    for comp in comps:
        if len(comp) > 1:
            for a in sorted(comp):
                for b in sorted(edges.get(a, ())):
                    if b in comp and a < b and a in edges.get(b, ()):
                        pairs.append((a, b))
            if len(comp) > 2:
                pairs.append(tuple(sorted(comp)))  # the component itself
    return pairs


def _drives_asyncio(src: str, tree: ast.Module) -> bool:
    """A module that imports asyncio, defines coroutines or schedules on an event loop."""
    if any(isinstance(n, ast.AsyncFunctionDef) for n in ast.walk(tree)):
        return True
    if any(t == "asyncio" for t, _l, _f in imports("x.py", tree)):
        return True
    return any(word in src for word in (".call_later(", ".call_soon(", ".create_task(", "run_in_executor("))


def measure(root: str) -> dict:
    loc = Counter()
    largest = []
    reaches = Counter()
    reach_files = set()
    infunc = 0
    asyncio_lines = {}
    pkg_edges: dict[str, set[str]] = defaultdict(set)
    for rel, path in modules(root):
        src = open(path, encoding="utf-8").read()
        tree = ast.parse(src, rel)
        n = src.count("\n")
        pkg = package_of(module_name(rel))
        loc[pkg] += n
        largest.append((n, rel))
        infunc += in_function_imports(tree)
        if rel not in WIRING:
            r = server_reaches(tree)
            if r:
                reaches.update(r)
                reach_files.add(rel)
        if pkg in DOMAIN and _drives_asyncio(src, tree):
            asyncio_lines[rel] = n
        for target, _line, _f in imports(rel, tree):
            if target.startswith("kesque."):
                other = package_of(target)
                if other != pkg:
                    pkg_edges[pkg].add(other)
    cyc = cycles(pkg_edges)
    return {
        "lines": sum(loc.values()),
        "lines_per_package": dict(loc.most_common()),
        "largest_files": [f"{rel} {n}" for n, rel in sorted(largest, reverse=True)[:10]],
        "server_reaches": sum(reaches.values()),
        "server_attributes": len(reaches),
        "server_reach_files": len(reach_files),
        "server_reaches_by_attribute": dict(reaches.most_common()),
        "package_cycles": ["↔".join(p) for p in cyc if len(p) == 2],
        "cyclic_components": [" ".join(p) for p in cyc if len(p) != 2],
        "in_function_imports": infunc,
        "asyncio_lines_in_domain_packages": sum(asyncio_lines.values()),
        "asyncio_modules_in_domain_packages": dict(sorted(asyncio_lines.items())),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    m = measure(os.path.abspath(args.root))
    if args.json:
        print(json.dumps(m, indent=2, ensure_ascii=False))
        return 0
    for key, value in m.items():
        if isinstance(value, dict):
            print(f"{key}:")
            for k, v in value.items():
                print(f"    {k:48} {v}")
        elif isinstance(value, list):
            print(f"{key}: {len(value)}")
            for v in value:
                print(f"    {v}")
        else:
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
