#!/usr/bin/env bash
# A profile-guided build of fulcrum (LLVM PGO through rustc's -Cprofile-generate and
# -Cprofile-use): the release build laid out by what a proxy under load executes.
#
#   bench/pgo.sh                       # writes target/pgo/fulcrum (about 12 minutes on 2 cores)
#   FULCRUM_BIN=target/pgo/fulcrum bench/compare.sh   # measure it against nginx and HAProxy
#
# 1. builds fulcrum instrumented (target/pgo-gen, its own target directory);
# 2. trains it: bench/compare.sh's cases with fulcrum alone (no peers), 2 s a case, one
#    repetition — least_conn, ip_hash, a connection per request, 50 routes, TCP, TLS, HTTP/2
#    from clients and to backends — all on loopback, bounded by compare.sh's own durations;
#    every process it starts is stopped by PID. Not `round_robin` and `logs`, the cases the
#    benchmark's claims rest on: the profile is not made on what it is measured with (the
#    HTTP/1.1 request path they take is trained by least_conn, ip_hash and routes);
# 3. merges the profiles with llvm-profdata (rustup's llvm-tools component, whose LLVM is
#    rustc's own; `rustup component add llvm-tools` if it is missing);
# 4. builds fulcrum again with the profile (target/pgo-use) and copies it to target/pgo/fulcrum.
#
# Measured on this 2-core VM (docs/performance.md, "With a profile-guided build"): 18–20% fewer
# user-space instructions a request and 45% fewer instruction-cache misses (valgrind), 11–15%
# less user CPU time a request, 3–5% more requests a second; the kernel's share, most of a
# proxied request's CPU here, does not change. The profile belongs to the code it was made from: run this again
# after changing the request path (rustc warns of functions whose profile no longer matches).
set -euo pipefail
cd "$(dirname "$0")/.."

PROFDATA=${PROFDATA:-$(find "$(rustc --print sysroot)" -name llvm-profdata -type f 2>/dev/null | head -1)}
if [ -z "$PROFDATA" ] || [ ! -x "$PROFDATA" ]; then
    echo "error: no llvm-profdata in rustc's sysroot: run \`rustup component add llvm-tools\` (or set PROFDATA to an llvm-profdata of rustc's LLVM version, $(rustc -vV | awk '/^LLVM/ { print $3 }'))" >&2
    exit 1
fi

PROFILES=$(mktemp -d /tmp/fulcrum-pgo.XXXXXX)
trap 'rm -rf "$PROFILES"' EXIT

echo "1/4 building fulcrum instrumented..." >&2
RUSTFLAGS="-Cprofile-generate=$PROFILES/raw" CARGO_TARGET_DIR=target/pgo-gen \
    cargo build --release --locked -p fulcrum -q

echo "2/4 training it on bench/compare.sh's cases..." >&2
FULCRUM_BIN=target/pgo-gen/release/fulcrum PEERS="" DURATION=2 WARMUP=1 REPS=1 CONNS=64 \
    CASES="least_conn ip_hash close routes tcp tls h2 h2_backend" \
    OUT="$PROFILES/training.md" bench/compare.sh >"$PROFILES/training.log" 2>&1 || {
    echo "error: the training run failed; its output:" >&2
    tail -20 "$PROFILES/training.log" >&2
    exit 1
}
if ! compgen -G "$PROFILES/raw/*.profraw" >/dev/null; then
    echo "error: the training wrote no profile (did fulcrum exit normally?)" >&2
    exit 1
fi

echo "3/4 merging the profiles..." >&2
"$PROFDATA" merge -o "$PROFILES/merged.profdata" "$PROFILES/raw"

echo "4/4 building fulcrum with the profile..." >&2
RUSTFLAGS="-Cprofile-use=$PROFILES/merged.profdata" CARGO_TARGET_DIR=target/pgo-use \
    cargo build --release --locked -p fulcrum -q
mkdir -p target/pgo
cp target/pgo-use/release/fulcrum target/pgo/fulcrum
echo "written: target/pgo/fulcrum" >&2
