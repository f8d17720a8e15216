#!/usr/bin/env python3
"""Fails if a top-level module of agent/src reaches itself through `crate::` paths (test
modules excluded): imports go one way (docs/architecture.md)."""
import glob
import os
import re
import sys

root = os.path.join(os.path.dirname(__file__), "..", "agent", "src")
uses = {}
for path in glob.glob(os.path.join(root, "**", "*.rs"), recursive=True):
    module = os.path.relpath(path, root)[:-3].split(os.sep)[0]
    code = open(path, encoding="utf-8").read().split("#[cfg(test)]")[0]
    uses.setdefault(module, set()).update(
        m for m in re.findall(r"crate::([a-z_]+)", code) if m != module
    )


def path_between(start, goal):
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


cycles = [path_between(m, m) for m in sorted(uses)]
cycles = [c for c in cycles if c]
for c in cycles:
    print("import cycle: " + " -> ".join(c), file=sys.stderr)
sys.exit(1 if cycles else 0)
