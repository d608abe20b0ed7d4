#!/usr/bin/env python3
"""Checks the dependency direction of corrflow's code.

Between crates, cargo already forbids cycles; this prints the crate graph from the Cargo.toml
files. Within each crate (the workspace crates in crates/, the root package's src/ and the
Python package's PyO3 crate in python/src/), it draws the graph of top-level modules from
`use crate::…` / `crate::…` paths (and `super::…` from a module's files) and fails if it has a
cycle, printing it.

Usage: scripts/module-graph.py [--dot]   (exit 1 on a cycle)
"""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
crates = {p.parent.name: p.parent for p in sorted(root.glob("crates/*/Cargo.toml"))}
crates["corrflow"] = root
# The Python package's extension crate (`corrflow-python`, module `_native`).
crates["python"] = root / "python"


def crate_deps(dir):
    text = (dir / "Cargo.toml").read_text()
    deps = text.split("[dependencies]", 1)[1].split("\n[", 1)[0] if "[dependencies]" in text else ""
    return sorted(set(re.findall(r"^corrflow-([a-z]+)", deps, re.M)))


def top_module(src, path):
    rel = path.relative_to(src)
    if rel.parts[0] in ("lib.rs", "main.rs"):
        return None
    return rel.parts[0].removesuffix(".rs")


def module_graph(src):
    edges = {}
    for path in src.rglob("*.rs"):
        m = top_module(src, path)
        if m is None:
            continue
        text = path.read_text()
        # Test modules may reach anywhere in their crate.
        text = text.split("#[cfg(test)]", 1)[0]
        # Comments name modules without depending on them.
        text = re.sub(r"//.*", "", text)
        targets = set(re.findall(r"\bcrate::([a-z_]+)", text))
        # A module's own files refer to siblings with super:: only at its top (mod.rs/lib).
        if len(path.relative_to(src).parts) == 1:
            targets |= set(re.findall(r"\bsuper::([a-z_]+)", text))
        targets.discard(m)
        mods = {p.stem if p.suffix else p.name for p in src.iterdir()} - {"lib", "main"}
        edges.setdefault(m, set()).update(t for t in targets if t in mods)
    return edges


def find_cycle(edges):
    state, stack = {}, []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for t in sorted(edges.get(n, ())):
            if state.get(t) == 1:
                return stack[stack.index(t):] + [t]
            if t not in state:
                c = visit(t)
                if c:
                    return c
        state[n] = 2
        stack.pop()
        return None

    for n in sorted(edges):
        if n not in state:
            c = visit(n)
            if c:
                return c
    return None


def file_graphs(src):
    """Per module directory: its files, and which sibling files each names through `super::`."""
    graphs = {}
    for d in [src] + [p for p in src.rglob("*") if p.is_dir()]:
        files = {p.stem: p for p in d.glob("*.rs") if p.stem not in ("mod", "lib", "main")}
        files.update({p.name: p / "mod.rs" for p in d.iterdir() if p.is_dir() and (p / "mod.rs").exists()})
        edges = {}
        for name, path in files.items():
            text = re.sub(r"//.*", "", path.read_text().split("#[cfg(test)]", 1)[0])
            refs = set(re.findall(r"\bsuper::([a-z_]+)", text))
            for group in re.findall(r"\bsuper::\{([^}]*)\}", text):
                refs |= set(re.findall(r"\b([a-z_]+)\b", group))
            if d == src:
                refs |= set(re.findall(r"\bcrate::([a-z_]+)", text))
            edges[name] = {r for r in refs if r in files and r != name}
        graphs[d] = edges
    return graphs


failed = False
print("crates (→ dependencies):")
for name, dir in sorted(crates.items()):
    print(f"  {name:<11} → {', '.join(crate_deps(dir)) or '-'}")
for name, dir in sorted(crates.items()):
    edges = module_graph(dir / "src")
    cycle = find_cycle(edges)
    if "--dot" in sys.argv:
        for a, ts in sorted(edges.items()):
            for t in sorted(ts):
                print(f'  "{name}::{a}" -> "{name}::{t}";')
    if cycle:
        failed = True
        print(f"{name}: module cycle: {' → '.join(cycle)}")
    else:
        order = ", ".join(f"{a}→{{{','.join(sorted(ts))}}}" for a, ts in sorted(edges.items()) if ts)
        print(f"{name}: no module cycle. {order}")
for name, dir in sorted(crates.items()):
    for d, edges in file_graphs(dir / "src").items():
        cycle = find_cycle(edges)
        if cycle:
            failed = True
            print(f"{name}: file cycle in {d.relative_to(root)}: {' → '.join(cycle)}")
print("file-level cycles within module directories: " + ("see above" if failed else "none"))
sys.exit(1 if failed else 0)
