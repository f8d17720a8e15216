#!/usr/bin/env bash
# Installs what the real-client tests in tests/clients need, on Debian (bookworm)
# with python3/pip and node 20/npm already present. Idempotent; run as root.
#   bash tests/clients/install-deps.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# kcat (librdkafka 2.0.2 on bookworm). kafkajs-lz4's native addon (lz4@0.6.5) is
# built by node-gyp at npm install time: needs make, g++ and python3.
if ! command -v kcat >/dev/null || ! command -v g++ >/dev/null || ! command -v make >/dev/null; then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends kcat build-essential
fi

# Into the machine's python3. A Debian-packaged python3 refuses that (PEP 668);
# there --break-system-packages is needed (or use a venv and put it first on PATH).
python3 -m pip install -r "$here/requirements.txt" \
    || python3 -m pip install --break-system-packages -r "$here/requirements.txt"

# package-lock.json pins everything; allowScripts in package.json lets lz4 build.
(cd "$here" && npm ci --no-audit --no-fund)
