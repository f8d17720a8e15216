#!/usr/bin/env python3
"""Fails if a module of the Kafka edge (`agent/src/api/`, `server.rs`) or of the HTTP
edge (`agent/src/http.rs`, `agent/src/http/`) reaches past the services: the metastore
(`strata_metastore`, `crate::metastore`, a broker's `.metastore()`), the replica manager
(`crate::replicas`, `.replicas()`) or the other edge (the HTTP edge naming `crate::api`
or Kafka's wire types, `kafka_protocol`; the Kafka edge naming `crate::http`).
Issue 34 wants none; the code has some, so this is a ratchet: `scripts/edge-imports.json`
holds how many each file has now. A file with more than its count (a new file: zero)
fails the check; a file with fewer fails too, until the baseline is lowered with
`--update`, so the count only goes down. Comments and test modules are not code.

    python3 scripts/check-edge-imports.py            # check
    python3 scripts/check-edge-imports.py --update   # after removing some
"""
import glob
import json
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SRC = os.path.join(ROOT, "agent", "src")
BASELINE = os.path.join(ROOT, "scripts", "edge-imports.json")

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


def counts() -> dict[str, int]:
    out: dict[str, int] = {}
    for patterns, other_edge in (KAFKA_EDGE, HTTP_EDGE):
        forbidden = re.compile("|".join(PAST_THE_SERVICES + other_edge))
        for pattern in patterns:
            for path in glob.glob(os.path.join(SRC, pattern), recursive=True):
                rel = os.path.relpath(path, ROOT)
                out[rel] = len(forbidden.findall(code_of(path)))
    return {k: v for k, v in sorted(out.items()) if v}


def main() -> int:
    now = counts()
    if "--update" in sys.argv[1:]:
        with open(BASELINE, "w", encoding="utf-8") as f:
            json.dump(now, f, indent=1)
            f.write("\n")
        print(f"edge imports: baseline set, {sum(now.values())} in {len(now)} files")
        return 0
    allowed = json.load(open(BASELINE, encoding="utf-8"))
    failures = []
    for path in sorted(set(now) | set(allowed)):
        n, limit = now.get(path, 0), allowed.get(path, 0)
        if n > limit:
            failures.append(f"{path}: {n} references past the services or to the other "
                            f"edge, {limit} allowed (call a service instead)")
        elif n < limit:
            failures.append(f"{path}: {n} references, the baseline says {limit}: lower it "
                            f"with `python3 scripts/check-edge-imports.py --update`")
    for f in failures:
        print(f"edge imports: {f}", file=sys.stderr)
    if not failures:
        print(f"edge imports: {sum(now.values())} left in {len(now)} files (none new)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
