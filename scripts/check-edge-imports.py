#!/usr/bin/env python3
"""Fails if a module of the Kafka edge (`agent/src/api/`, `server.rs`) or of the HTTP
edge (`agent/src/http.rs`, `agent/src/http/`) reaches past the services: the metastore
(`strata_metastore`, `crate::metastore`, a broker's `.metastore()`), the replica manager
(`crate::replicas`, `.replicas()`) or the other edge (the HTTP edge naming `crate::api`
or Kafka's wire types, `kafka_protocol`; the Kafka edge naming `crate::http`). Each
reference is printed with its file and line: call a service instead (a type a service
takes or answers is named through that service). Comments and test modules are not
code.

    python3 scripts/check-edge-imports.py
"""
import glob
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SRC = os.path.join(ROOT, "agent", "src")

PAST_THE_SERVICES = [
    r"\bstrata_metastore\b",
    r"\bcrate::metastore\b",
    r"\.metastore\(\)",
    r"\bcrate::replicas\b",
    r"\.replicas\(\)",
]
KAFKA_EDGE = (["api/**/*.rs", "api.rs", "server.rs"], [r"\bcrate::http\b"])
HTTP_EDGE = (["http/**/*.rs", "http.rs"], [r"\bcrate::api\b", r"\bkafka_protocol\b"])


def code_of(path: str) -> str:
    code = open(path, encoding="utf-8").read().split("#[cfg(test)]")[0]
    return re.sub(r"//.*", "", code)


def references() -> list[str]:
    out: list[str] = []
    for patterns, other_edge in (KAFKA_EDGE, HTTP_EDGE):
        forbidden = re.compile("|".join(PAST_THE_SERVICES + other_edge))
        for pattern in patterns:
            for path in sorted(glob.glob(os.path.join(SRC, pattern), recursive=True)):
                rel = os.path.relpath(path, ROOT)
                for n, line in enumerate(code_of(path).split("\n"), 1):
                    if forbidden.search(line):
                        out.append(f"{rel}:{n}: {line.strip()}")
    return out


def main() -> int:
    found = references()
    for r in found:
        print(f"edge imports: {r} (past the services or to the other edge: call a "
              f"service instead)", file=sys.stderr)
    if not found:
        print("edge imports: none (the edges call only the services)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
