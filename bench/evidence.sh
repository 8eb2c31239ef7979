#!/usr/bin/env bash
# The evidence table (issue 30): every load-aware algorithm on every scenario of the seeds'
# experiments and the simulator's, then docs/evidence.md generated from the results.
#
#   bench/evidence.sh                          # the simulator only: every scenario below
#   LAB=1 bench/evidence.sh                    # and the lab scenarios on real sockets (long:
#                                              # each contender × repetition is a run of its own)
#   FULCRUM_BIN=/tmp/fulcrum bench/evidence.sh # a prebuilt binary (nothing is built)
#   SIM_REPS=10 bench/evidence.sh              # fewer simulated repetitions of the lab scenarios
#
# What it does:
#   * builds fulcrum (release) unless FULCRUM_BIN is given;
#   * the simulator's own scenarios (SIM_SCENARIOS) with `--algorithms load-aware`, each with the
#     repetitions its file asks (40 where a run takes seconds; fewer for the big ones, said in
#     their comments);
#   * the lab's scenarios (LAB_SCENARIOS) in the simulator with `--algorithms load-aware
#     --repetitions SIM_REPS` (default 40: their files ask few, for the lab's time);
#   * with LAB=1, the same lab scenarios on real sockets, with their files' repetitions;
#   * `fulcrum evidence` over every results directory, into OUT (default docs/evidence.md).
# Not in the table: sim-supermarket (a check of the simulator against Mitzenmacher's closed form,
# one algorithm at many loads), sim-speed (the simulator's own speed), and the scenarios about
# retries, queues and the demo (retry-*, queue, demo), which compare policies, not algorithms.
# The load-aware set is one list, lab::evidence::LOAD_AWARE (`--algorithms load-aware`).
# Results go to RESULTS (default target/evidence/{sim,lab}/SCENARIO: reports are large and
# made again by the commands the table lists).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh

FULCRUM_BIN=${FULCRUM_BIN:-}
resolve_executable FULCRUM_BIN
if [ -z "$FULCRUM_BIN" ]; then
    cargo build --release --locked -p fulcrum -q
    FULCRUM_BIN=target/release/fulcrum
fi
RESULTS=${RESULTS:-target/evidence}
OUT=${OUT:-docs/evidence.md}
SIM_REPS=${SIM_REPS:-40}
LAB=${LAB:-0}
SIM_SCENARIOS=${SIM_SCENARIOS:-"sim-stale sim-timeouts sim-fleet sim-scale"}
LAB_SCENARIOS=${LAB_SCENARIOS:-"seed000-jmeter-ramp seed001-siege-ramp seed002-cpu-sine seed002-cpu-sine-equal seed002-io-sine seed002-io-sine-equal seed002-mixed-sine seed002-mixed-sine-equal seed003-ab-unequal-hosts seed004-bursts antagonist"}

dirs=()
for s in $SIM_SCENARIOS; do
    echo "== sim $s" >&2
    "$FULCRUM_BIN" sim "lab/scenarios/$s.toml" --quiet --algorithms load-aware \
        --out "$RESULTS/sim/$s" >/dev/null
    dirs+=("$RESULTS/sim/$s")
done
for s in $LAB_SCENARIOS; do
    echo "== sim $s ($SIM_REPS repetitions)" >&2
    "$FULCRUM_BIN" sim "lab/scenarios/$s.toml" --quiet --algorithms load-aware \
        --repetitions "$SIM_REPS" --out "$RESULTS/sim/$s" >/dev/null
    dirs+=("$RESULTS/sim/$s")
done
if [ "$LAB" = 1 ]; then
    for s in $LAB_SCENARIOS; do
        echo "== lab $s" >&2
        "$FULCRUM_BIN" lab run "lab/scenarios/$s.toml" --quiet --algorithms load-aware \
            --out "$RESULTS/lab/$s" >/dev/null
        dirs+=("$RESULTS/lab/$s")
    done
fi
"$FULCRUM_BIN" evidence "${dirs[@]}" --out "$OUT"
