#!/usr/bin/env bash
# Instructions fulcrum executes per proxied request, counted by valgrind (cachegrind, no cache
# simulation): a figure that does not move with the machine's load, unlike req/s. For a change
# on the request path, measured against the build before it:
#
#   BASELINE=/tmp/fulcrum-old bench/instructions.sh
#   N=20000 CONNS=64 BASELINE=... bench/instructions.sh
#
# For each build (this checkout's release build, and BASELINE if given): one worker, round
# robin over 3 nginx backends (a small 200), keep-alive to clients and backends, access log
# off (compare.sh's round_robin case); h2load sends N/4 and then, in a second run, 5N/4
# HTTP/1.1 requests over CONNS connections, each run under cachegrind from start to stop;
# the difference of the two totals over N is the cost of one request, start-up, warm-up and
# shutdown cancelled out. The count is the same to within 0.1% from run to run.
# What it does not see: time spent waiting (syscalls' own cost in the kernel, cache misses,
# contention): a build can execute fewer instructions and still be slower; req/s is
# compare.sh's to measure, this is what explains it.
#
# Every process it starts is stopped on exit, by PID.
set -euo pipefail

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
# Resolved before the cd below, so a path relative to where it was run from still works.
resolve_baseline
cd "$(dirname "$0")/.."

N=${N:-20000}          # requests the difference is taken over
CONNS=${CONNS:-64}     # client connections
PORT_BACKEND=${PORT_BACKEND:-19401}   # 3 ports from here
PORT_PROXY=${PORT_PROXY:-19410}

need nginx h2load valgrind
[ -x target/release/fulcrum ] || cargo build --release --locked -p fulcrum
REVISION=$(git rev-parse --short HEAD 2>/dev/null || echo '?')

work_dir fulcrum-instructions
cp target/release/fulcrum "$WORK/fulcrum"


{
    echo "worker_processes 1;"
    echo "daemon off;"
    echo "pid $WORK/nginx.pid;"
    echo "error_log $WORK/nginx-error.log;"
    echo "events { worker_connections 4096; }"
    echo "http {"
    echo "  access_log off;"
    echo "  keepalive_requests 1000000;"
    for i in 0 1 2; do
        port=$((PORT_BACKEND + i))
        echo "  server { listen 127.0.0.1:$port; location / { return 200 \"backend $port\\n\"; } }"
    done
    echo "}"
} >"$WORK/nginx.conf"
/usr/sbin/nginx -c "$WORK/nginx.conf" -e "$WORK/nginx-error.log" &
PIDS+=("$!")
wait_port "$PORT_BACKEND" 20

{
    echo "workers = 1"
    echo "access_log = false"
    echo "[[listener]]"
    echo "listen = \"127.0.0.1:$PORT_PROXY\""
    echo "upstream = \"b\""
    echo "[[upstream]]"
    echo "name = \"b\""
    echo "algorithm = \"round_robin\""
    echo "keepalive = 1024"
    for i in 0 1 2; do
        echo "[[upstream.backend]]"
        echo "addr = \"127.0.0.1:$((PORT_BACKEND + i))\""
    done
} >"$WORK/fulcrum.toml"

# instructions BIN REQUESTS: the instructions BIN executed, from start to stop, serving REQUESTS.
instructions() {
    local bin=$1 requests=$2 log=$WORK/cachegrind.log pid
    valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \
        "$bin" run --config "$WORK/fulcrum.toml" 2>"$log" &
    pid=$!
    PIDS+=("$pid")
    wait_port "$PORT_PROXY" 20
    if ! h2load --h1 -n "$requests" -c "$CONNS" "http://127.0.0.1:$PORT_PROXY/" >"$WORK/h2load.log" 2>&1 ||
        ! grep -q "$requests succeeded" "$WORK/h2load.log"; then
        echo "error: not every request succeeded through $bin:" >&2
        cat "$WORK/h2load.log" >&2
        exit 1
    fi
    kill -TERM "$pid"
    wait "$pid" || true
    awk '/I +refs:/ { gsub(",", "", $NF); print $NF }' "$log"
}

# per_request BIN: instructions per request, from two runs.
per_request() {
    local small large
    small=$(instructions "$1" $((N / 4)))
    large=$(instructions "$1" $((N / 4 + N)))
    echo $(((large - small) / N))
}

echo "instructions per request, round robin, 1 worker, $CONNS connections, over $N requests"
head=$(per_request "$WORK/fulcrum")
echo "fulcrum ($REVISION): $head"
if [ -n "$BASELINE" ]; then
    base=$(per_request "$BASELINE")
    echo "baseline ($BASELINE): $base"
    awk -v h="$head" -v b="$base" 'BEGIN { printf "fulcrum / baseline: %.3f\n", h / b }'
fi
