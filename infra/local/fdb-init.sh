#!/usr/bin/env bash
# One-shot: make the FoundationDB of infra/local/compose.yaml usable. A new cluster gets
# `configure new single ssd`; an existing one answers "Database already exists", which
# is success too. Exits once the database reports itself available.
set -euo pipefail

cluster_file=/etc/foundationdb/fdb.cluster
fdb() { fdbcli -C "$cluster_file" --timeout 10 --exec "$1" 2>&1; }

for attempt in $(seq 1 60); do
    if fdb "status minimal" | grep -q "The database is available"; then
        echo "fdb-init: database available"
        exit 0
    fi
    out=$(fdb "configure new single ssd" || true)
    case "$out" in
        *"Database created"*) echo "fdb-init: database created" ;;
        *"already exists"*) echo "fdb-init: database already configured; waiting for it" ;;
        *) echo "fdb-init: attempt $attempt: ${out:-no answer}" ;;
    esac
    sleep 2
done
echo "fdb-init: database not available after 60 attempts" >&2
exit 1
