#!/usr/bin/env bash
# Runs the Java reference-client tests (Maven + JUnit 5) against a strata binary.
#
#   STRATA_BIN=/path/to/strata bash tests/java/run.sh [extra mvn args, e.g. -Dtest=ProducerTest]
#
# STRATA_BIN defaults to <repo>/target/debug/strata. Maven fetches its plugins and the
# Kafka jars from Maven Central on the first run (~/.m2 caches them). Exits non-zero when
# a test fails; Surefire's summary ("Tests run: N, Failures: F, Errors: E, Skipped: S")
# is printed either way.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
export STRATA_BIN="${STRATA_BIN:-$repo/target/debug/strata}"
if [ ! -x "$STRATA_BIN" ]; then
  echo "tests/java: strata binary not found at $STRATA_BIN (cargo build, or set STRATA_BIN)" >&2
  exit 2
fi
if [ -d /usr/lib/jvm/java-17-openjdk-amd64 ] && [ -z "${JAVA_HOME:-}" ]; then
  export JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64
fi
args=()
if [ -n "${STRATA_CLIENT_LOG_LEVEL:-}" ]; then
  args+=("-Dstrata.clientLogLevel=$STRATA_CLIENT_LOG_LEVEL")
fi
echo "tests/java: STRATA_BIN=$STRATA_BIN"
# -B: no colours or progress; -ntp: no download progress lines. Not -q: it hides the
# Surefire summary.
exec mvn -B -ntp -Dstyle.color=never -f "$here/pom.xml" "${args[@]}" "$@" test
