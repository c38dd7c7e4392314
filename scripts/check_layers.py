"""Fails when a lower layer of tfbatch imports a higher one, or when modules import in a cycle.

    python scripts/check_layers.py            # prints each violation, exit 1 if any

Layers (docs/architecture.md has the picture), bottom first. A module may import its own
package and any package on a *lower* level; two packages on the same level may not import
each other. Every ``import`` counts, including the lazy ones inside functions: a lazy import
only hides a dependency from start-up, not from the design. Cycles are checked among
module-level imports (the ones that run at import time).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "src" / "tfbatch"

# package (or top-level module) -> level; higher levels build on lower ones.
LAYERS: dict[str, int] = {
    "errors": 0, "lazy": 0, "sockio": 0, "limits": 0,
    "ports": 1, "settings": 1, "labels": 1,
    "storage": 2,
    "batching": 3,
    "runtime": 4,
    "records": 5,
    "artifact": 6,
    "tfs": 7,
    "handlers": 8,
    "transform": 9,
    "engines": 10,
    "serve": 11,
    "evaluate": 12, "train": 12,
    "testing": 13,
    "api": 14, "console": 14,
    "sdk": 15, "ray_data": 15, "pytest_plugin": 15, "demo": 15, "apiserver": 15,
    "cli": 16,
    "__main__": 17, "__init__": 17,
}


def unit_of(module: str) -> str:
    """The layer unit of a dotted module name inside tfbatch: its first component."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def module_name(path: Path, root: Path = ROOT) -> str:
    """The dotted name of ``path`` inside the package folder ``root`` (named ``tfbatch``)."""
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1] if len(parts) > 2 else parts
    return ".".join(parts)


def imports(path: Path, module: str) -> Iterator[tuple[str, int, bool]]:
    """(imported tfbatch module, line, at module level) for every import in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    top_level = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                is_pkg = path.name == "__init__.py"
                base = base[: len(base) - node.level + (1 if is_pkg else 0)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            names = [prefix] + [f"{prefix}.{alias.name}" for alias in node.names]
        for name in names:
            if name == "tfbatch" or name.startswith("tfbatch."):
                yield name, node.lineno, id(node) in top_level


def check(root: Path = ROOT) -> list[str]:
    problems: list[str] = []
    modules = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        src_unit = unit_of(module) if module != "tfbatch" else "__init__"
        if src_unit not in LAYERS:
            problems.append(f"{path}: package {src_unit!r} has no layer; add it to LAYERS and docs/architecture.md")
            continue
        for target, line, top in imports(path, module):
            if target not in modules:
                continue  # "from pkg import name" also yields pkg.name, which may be an attribute
            dst_unit = unit_of(target) if target != "tfbatch" else "__init__"
            if dst_unit != src_unit and dst_unit in LAYERS and LAYERS[dst_unit] >= LAYERS[src_unit]:
                problems.append(f"{path}:{line}: {src_unit} (level {LAYERS[src_unit]}) imports {target} "
                                f"({dst_unit}, level {LAYERS[dst_unit]})")
            if top and target != module:
                graph[module].add(target)
    problems.extend(f"import cycle: {' -> '.join(cycle)}" for cycle in cycles(graph))
    return problems


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One representative cycle per strongly connected component with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        work = [(node, iter(sorted(graph[node])))]
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        while work:
            current, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[current] = min(low[current], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[current])
            if low[current] == index[current]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == current:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def main() -> int:
    problems = check()
    for problem in problems:
        print(problem)
    print(f"{len(problems)} layering problem(s)" if problems else "layers ok: no upward imports, no cycles")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
