#!/usr/bin/env bash
# Runs strata's franz-go test suite (tests/go) against a strata binary.
#
#   STRATA_BIN=/path/to/strata tests/go/run.sh [go test flags, e.g. -run TestAdmin]
#
# STRATA_BIN defaults to <repo>/target/debug/strata. Modules are fetched through the
# Go module proxy if they are not in the module cache yet. Exits non-zero on failure.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin="${STRATA_BIN:-$here/../../target/debug/strata}"
# go test runs the tests in the package directory: make the path absolute first.
case "$bin" in
  /*) ;;
  *) bin="$PWD/$bin" ;;
esac
export STRATA_BIN="$bin"

if [ ! -x "$STRATA_BIN" ]; then
  echo "strata binary not found at $STRATA_BIN; build it (cargo build) or set STRATA_BIN" >&2
  exit 2
fi

cd "$here"
echo "franz-go suite: STRATA_BIN=$STRATA_BIN, $(go version)"
exec go test -count=1 -v -timeout "${GO_TEST_TIMEOUT:-10m}" "$@" ./...
