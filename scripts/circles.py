#!/usr/bin/env python3
"""Refuses module circles: imports in src/ (Rust), python/tinyq/ and node/ run one way.

Reads the import lines of each language, builds the graph of modules and prints every
circle with the arrows that close it (and the names each arrow brings in). Exit 1 when
there is one. Standard library only; `make check` runs it.

What counts as an arrow:
- Rust: `use crate::a::b`, `crate::a::f(...)`, `super::x` and `$crate::...` paths, resolved to
  the deepest module that has a file. A folder's `mod.rs` declaring and re-exporting its own
  parts (`mod x; pub use x::Y;`) is its table of contents, not an arrow, and so is lib.rs
  registering every module (it is the top; sqlite/load.rs calls its `register_all` at load).
  `#[cfg(test)]` code is left out (a test module uses its parent by design).
- Python: every import between the package's modules, those inside functions too (a
  lazy import hides a circle, it does not remove it); `if TYPE_CHECKING:` blocks are not.
- Node: `require('./x')` and `import ... from './x'` between the helper's files.

Usage: circles.py [--rust DIR] [--python DIR] [--node DIR]; with none, the repository's own.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections import defaultdict
from pathlib import Path

# ---------------------------------------------------------------- Rust


def rust_modules(src: Path) -> dict[str, Path]:
    """Module path ('jobs', 'limits::groups', 'crate' for lib.rs) -> its file."""
    mods: dict[str, Path] = {}
    for f in sorted(src.rglob("*.rs")):
        rel = f.relative_to(src).with_suffix("")
        parts = list(rel.parts)
        if parts == ["lib"] or parts == ["main"]:
            mods["crate"] = f
            continue
        if parts[-1] == "mod":
            parts = parts[:-1]
        mods["::".join(parts)] = f
    return mods


def _strip_rust(text: str) -> str:
    """Code without comments, string literals and the #[cfg(test)] items."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'r#*"(?:.|\n)*?"#*', '""', text)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    cut = re.search(r"#\[cfg\(test\)\]", text)
    return text[: cut.start()] if cut else text


def _use_paths(tree: str) -> list[list[str]]:
    """Expands a use tree ('a::{b, c::{d, e}}') into its paths."""
    out: list[list[str]] = []

    def parse(s: str, prefix: list[str]) -> None:
        s = s.strip()
        if not s:
            return
        depth, start, items = 0, 0, []
        if s.startswith("{") and s.endswith("}"):
            inner = s[1:-1]
            for i, ch in enumerate(inner):
                if ch == "{":
                    depth += 1
                elif ch == "}":
                    depth -= 1
                elif ch == "," and depth == 0:
                    items.append(inner[start:i])
                    start = i + 1
            items.append(inner[start:])
            for item in items:
                parse(item, prefix)
            return
        brace = s.find("{")
        if brace >= 0:
            head = [p for p in s[:brace].split("::") if p.strip()]
            parse(s[brace:], prefix + [p.strip() for p in head])
            return
        name = re.split(r"\s+as\s+", s)[0].strip()
        out.append(prefix + [p.strip() for p in name.split("::") if p.strip()])

    parse(tree, [])
    return out


def rust_graph(src: Path) -> dict[str, dict[str, set[str]]]:
    mods = rust_modules(src)
    graph: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))

    def resolve(me: str, path: list[str]) -> tuple[str, str] | None:
        """(module, name) a path names, from module `me`; None outside the crate."""
        if not path:
            return None
        here = me.split("::") if me != "crate" else []
        head, rest = path[0], path[1:]
        if head in ("crate", "$crate"):
            base: list[str] = []
        elif head in ("super", "self"):
            base = here if head == "self" else here[:-1]
            while rest and rest[0] == "super":
                base, rest = base[:-1], rest[1:]
        else:
            return None  # a crate from outside, or std
        best, name = "crate", rest[0] if rest else ""
        for i in range(len(rest)):
            cand = "::".join(base + rest[: i + 1])
            if cand in mods:
                best, name = cand, rest[i + 1] if i + 1 < len(rest) else ""
        if best == "crate" and base:
            best = "::".join(base)
        return best, name

    for me, f in mods.items():
        code = _strip_rust(f.read_text())
        children = {m for m in mods if m != me and m.rsplit("::", 1)[0] == me} if f.name == "mod.rs" else set()
        if me == "crate":
            children = {m for m in mods if "::" not in m and m != "crate"}
        paths: list[tuple[list[str], bool]] = []
        for m in re.finditer(r"\b((?:pub(?:\([^)]*\))?\s+)?)use\s+([^;]+);", code):
            for p in _use_paths(m.group(2)):
                paths.append((p, bool(m.group(1))))
        inline = re.sub(r"\buse\s+[^;]+;", "", code)
        for m in re.finditer(r"(?<![\w:])(\$crate|crate|super)((?:::\w+)+)", inline):
            paths.append(([m.group(1)] + m.group(2).split("::")[1:], False))
        for path, exported in paths:
            got = resolve(me, path)
            if not got:
                continue
            target, name = got
            if target == me or target not in mods:
                continue
            # A folder's own parts, declared and re-exported by its mod.rs: its contents.
            if target in children and (exported or me == "crate"):
                continue
            names = graph[me][target]
            if name not in ("", "self", "*"):
                names.add(name)
            else:  # a module brought in by name: the names used through it
                local = target.rsplit("::", 1)[-1]
                names.update(re.findall(rf"(?<![\w:]){local}::(\w+)", inline))
    return graph


# ---------------------------------------------------------------- Python


def _type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def python_graph(pkg: Path) -> dict[str, dict[str, set[str]]]:
    package = pkg.name
    mods = {f.stem if f.name != "__init__.py" else "__init__": f for f in sorted(pkg.glob("*.py"))}
    graph: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))

    def visit(node: ast.AST, me: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                for other in child.orelse:
                    visit(other, me)
                continue
            if isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level == 1 or base == package or base.startswith(package + "."):
                    modname = base[len(package) :].lstrip(".") if child.level == 0 else base
                    for alias in child.names:
                        if not modname and alias.name in mods:
                            graph[me][alias.name].add("(module)")
                        elif modname in mods:
                            graph[me][modname].add(alias.name)
                        elif not modname:
                            graph[me]["__init__"].add(alias.name)
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.startswith(package + "."):
                        sub = alias.name.split(".")[1]
                        if sub in mods:
                            graph[me][sub].add("(module)")
            visit(child, me)

    for me, f in mods.items():
        visit(ast.parse(f.read_text(), str(f)), me)
        graph[me].pop(me, None)
    return graph


# ---------------------------------------------------------------- Node

_JS_IMPORT = re.compile(
    r"""(?:require\(\s*|\bfrom\s+|\bimport\s*\(\s*|^\s*import\s+)['"](\.{1,2}/[^'"]+)['"]""", re.M
)


def node_graph(root: Path) -> dict[str, dict[str, set[str]]]:
    files = {f.name: f for f in sorted(list(root.glob("*.js")) + list(root.glob("*.mjs")))}
    graph: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for me, f in files.items():
        text = re.sub(r"/\*.*?\*/", " ", f.read_text(), flags=re.S)
        text = re.sub(r"^\s*//[^\n]*", "", text, flags=re.M)
        for m in _JS_IMPORT.finditer(text):
            target = (f.parent / m.group(1)).resolve()
            for cand in (target, target.with_name(target.name + ".js"), target / "index.js"):
                if cand.is_file() and cand.parent == root.resolve() and cand.name in files:
                    if cand.name != me:
                        graph[me][cand.name].add("(module)")
                    break
    return graph


# ---------------------------------------------------------------- circles


def circles(graph: dict[str, dict[str, set[str]]]) -> list[list[str]]:
    """One shortest circle through each strongly connected group of modules."""
    nodes = set(graph) | {t for ts in graph.values() for t in ts}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    groups: list[set[str]] = []
    counter = [0]

    sys.setrecursionlimit(10000)

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, {})):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(nodes):
        if v not in index:
            strong(v)

    found = []
    for group in groups:
        start = min(group)
        # breadth-first from start back to start, inside the group
        prev: dict[str, str] = {}
        queue = [start]
        seen = {start}
        end = None
        while queue and end is None:
            nxt = []
            for v in queue:
                for w in sorted(graph.get(v, {})):
                    if w == start:
                        end = v
                        break
                    if w in group and w not in seen:
                        seen.add(w)
                        prev[w] = v
                        nxt.append(w)
                if end is not None:
                    break
            queue = nxt
        path = [start]
        v = end
        while v is not None and v != start:
            path.append(v)
            v = prev.get(v)
        path = [start] + list(reversed(path[1:])) + [start]
        found.append((sorted(group), path))
    return found


def report(lang: str, graph: dict[str, dict[str, set[str]]]) -> int:
    bad = circles(graph)
    for group, path in bad:
        print(f"{lang}: a circle of {len(group)} modules: {', '.join(group)}")
        for a, b in zip(path, path[1:]):
            names = ", ".join(sorted(graph[a][b])) or "the module"
            print(f"  {a} -> {b}   ({names})")
    return len(bad)


def main(argv: list[str] | None = None) -> int:
    root = Path(__file__).resolve().parent.parent
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rust", type=Path)
    ap.add_argument("--python", type=Path)
    ap.add_argument("--node", type=Path)
    args = ap.parse_args(argv)
    if not (args.rust or args.python or args.node):
        args.rust, args.python, args.node = root / "src", root / "python" / "tinyq", root / "node"
    n = 0
    if args.rust:
        n += report("rust", rust_graph(args.rust))
    if args.python:
        n += report("python", python_graph(args.python))
    if args.node:
        n += report("node", node_graph(args.node))
    if n:
        print(f"{n} circle(s): move what both sides need into a lower module both use")
        return 1
    print("no module circle (rust, python, node)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
