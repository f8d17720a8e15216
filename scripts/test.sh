#!/usr/bin/env bash
# Installs what the tests need and runs them all: formatting, lints, the Rust test suite
# (unit, property and protocol-level tests), then the real-client tests against a real
# `strata` process (librdkafka via confluent-kafka and kcat, kafka-python, kafkajs, the
# Java client and Kafka's own tools, franz-go).
#
#   ./scripts/test.sh            # everything
#   SKIP_INSTALL=1 ./scripts/test.sh   # assume the packages are already installed
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

started=$(date +%s)
step() { printf '\n==> [%ds] %s\n' "$(( $(date +%s) - started ))" "$*"; }

if [ "${SKIP_INSTALL:-0}" != 1 ]; then
    step "installing test dependencies (apt, pip, npm)"
    # libclang: bindgen for the FoundationDB bindings (the `fdb` feature is only checked
    # here, never linked: there is no libfdb_c on this machine).
    # iperf3: the loopback reference of the benchmark suite.
    # mold: a faster linker for the test build's many binaries (used only if present).
    if ! ls /usr/lib/llvm-*/lib/libclang.so* >/dev/null 2>&1 || ! command -v iperf3 >/dev/null \
        || ! command -v mold >/dev/null; then
        apt-get update
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libclang-dev iperf3 mold
    fi
    bash tests/clients/install-deps.sh
    # The Java and Go suites use the machine's JDK 17, Maven and Go; their libraries
    # come from Maven Central and the Go module proxy when they run.
    for tool in java mvn go; do
        command -v "$tool" >/dev/null || { echo "test.sh: $tool is needed (JDK 17, Maven, Go)" >&2; exit 1; }
    done
fi

step "cargo fmt --check"
cargo fmt --all -- --check

step "strata-replication depends on nothing with I/O (no tokio, no SQLite)"
if cargo tree -p strata-replication -e normal --prefix none --locked | grep -E '^(tokio|rusqlite|libsqlite3-sys|strata-metastore) '; then
    echo "test.sh: strata-replication must stay pure (see docs/architecture.md)" >&2
    exit 1
fi

step "no import cycles between the modules of any crate"
python3 scripts/check-module-cycles.py

step "the edges reach the metastore, the replica manager and each other no more than before"
python3 scripts/check-edge-imports.py

step "cargo build with clippy's lints (every target: the strata and strata-bench binaries the client tests run, and the tests)"
# clippy-driver is rustc with clippy's lints: as the workspace's compiler wrapper it lints
# and builds in one pass, where `cargo clippy` then `cargo build` would compile the
# workspace twice. The same environment stays set for `cargo test`, so it builds nothing.
# --all-targets: the feature set `cargo test` needs (dev-dependencies unify features), so
# dependencies build once and `cargo test` only runs.
RUSTC_WORKSPACE_WRAPPER="$(rustc --print sysroot)/bin/clippy-driver"
CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
export RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS
# Some thirty test binaries of 100+ MB each: mold links them several times faster than
# the default linker. Kept for every cargo call below, so nothing builds twice.
if command -v mold >/dev/null; then
    export RUSTFLAGS="${RUSTFLAGS:-} -C link-arg=-fuse-ld=mold"
fi
# --timings: target/cargo-timings/cargo-timing.html shows where the build time went.
cargo build --workspace --all-targets --locked --timings

step "cargo clippy of the FoundationDB backend (type-checked, not linked)"
# The backend lives in strata-metastore alone (the agent reaches it through
# strata_metastore::open_fdb, which has no feature switch of its own), so checking that
# crate with the feature covers every line the default build leaves out.
cargo clippy -p strata-metastore --all-targets --features fdb --locked -- -D warnings

step "cargo test"
cargo test --workspace --locked

step "benchmark smoke run (criterion benches once each, in test mode)"
cargo test --workspace --locked --bench log_hot_path --bench parquet_codec

if [ -n "${FDB_CLUSTER_FILE:-}" ]; then
    step "metastore tests on FoundationDB ($FDB_CLUSTER_FILE)"
    cargo test -p strata-metastore --features fdb --locked
else
    echo "FoundationDB metastore tests skipped: FDB_CLUSTER_FILE is not set (no cluster here)"
fi

step "real-client tests (strata-bench's smoke tests among them)"
export STRATA_BIN="$PWD/target/debug/strata"
python3 -m pytest tests/clients

step "Java client tests (kafka-clients 4.1 and Kafka's own tools, from Maven Central)"
bash tests/java/run.sh

step "Go client tests (franz-go, from the Go module proxy)"
bash tests/go/run.sh

step "benchmark suite smoke run (debug builds, one small configuration)"
python3 bench/suite.py --quick --strata target/debug/strata --bench target/debug/strata-bench \
    --out "$(mktemp -d)/suite.json"
python3 bench/suite.py --quick --http --strata target/debug/strata --bench target/debug/strata-bench \
    --out "$(mktemp -d)/suite.json"

step "infra checks (Terraform, checkov, compose; offline)"
bash scripts/check-infra.sh

step "done"
