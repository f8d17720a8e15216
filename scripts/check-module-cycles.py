#!/usr/bin/env python3
"""Fails if a top-level module of any workspace crate reaches itself through `crate::`
paths (test modules excluded): imports go one way (docs/architecture.md).

Reads the workspace members from Cargo.toml; for each, every `.rs` file under its
`src/` belongs to the top-level module its path starts with (`src/partition/log.rs`
and `src/partition.rs` are both `partition`). `crate::a::b` and `crate::{a, b::c}`
name modules `a` and `b`; comments (doc links) are not imports. The crate root (`lib.rs`, `main.rs`) and binaries under
`src/bin/` are left out: they tie the modules together.
"""
import glob
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def members() -> list[str]:
    text = open(os.path.join(ROOT, "Cargo.toml"), encoding="utf-8").read()
    listed = re.search(r"members\s*=\s*\[([^\]]*)\]", text)
    return re.findall(r'"([^"]+)"', listed.group(1)) if listed else []


def imported(code: str) -> set[str]:
    names = set(re.findall(r"crate::([a-z_][a-z0-9_]*)", code))
    for group in re.findall(r"crate::\{([^}]*)\}", code):
        names.update(re.findall(r"(?:^|,)\s*([a-z_][a-z0-9_]*)", group))
    return names


def module_uses(src: str) -> dict[str, set[str]]:
    uses: dict[str, set[str]] = {}
    for path in glob.glob(os.path.join(src, "**", "*.rs"), recursive=True):
        parts = os.path.relpath(path, src)[:-3].split(os.sep)
        if parts[0] == "bin" or parts == ["lib"] or parts == ["main"]:
            continue
        module = parts[0]
        code = open(path, encoding="utf-8").read().split("#[cfg(test)]")[0]
        code = re.sub(r"//.*", "", code)  # doc links name modules without importing them
        uses.setdefault(module, set()).update(m for m in imported(code) if m != module)
    return uses


def path_between(uses, start, goal):
    """A chain of imports from start to goal, if there is one."""
    todo, seen = [(start, [start])], {start}
    while todo:
        node, chain = todo.pop()
        for nxt in sorted(uses.get(node, ())):
            if nxt == goal:
                return chain + [nxt]
            if nxt not in seen:
                seen.add(nxt)
                todo.append((nxt, chain + [nxt]))
    return None


found = 0
for crate in members():
    src = os.path.join(ROOT, crate, "src")
    if not os.path.isdir(src):
        continue
    uses = module_uses(src)
    for module in sorted(uses):
        chain = path_between(uses, module, module)
        if chain:
            found += 1
            print(f"import cycle in {crate}/: " + " -> ".join(chain), file=sys.stderr)
sys.exit(1 if found else 0)
