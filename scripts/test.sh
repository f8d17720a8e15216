#!/usr/bin/env bash
# Installs what the tests need and runs them all: formatting, lints, the Rust test suite
# (unit, property and protocol-level tests), then the real-client tests against a real
# `strata` process (librdkafka via confluent-kafka and kcat, kafka-python, kafkajs).
#
#   ./scripts/test.sh            # everything
#   SKIP_INSTALL=1 ./scripts/test.sh   # assume the packages are already installed
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() { printf '\n==> %s\n' "$*"; }

if [ "${SKIP_INSTALL:-0}" != 1 ]; then
    step "installing test dependencies (apt, pip, npm)"
    bash tests/clients/install-deps.sh
fi

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo build (the strata binary the client tests run)"
cargo build --locked -p strata-agent --bin strata

step "cargo test"
cargo test --workspace --locked

step "real-client tests"
export STRATA_BIN="$PWD/target/debug/strata"
python3 -m pytest tests/clients
