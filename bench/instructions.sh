#!/usr/bin/env bash
# Instructions each proxy executes per proxied request, counted by valgrind (cachegrind, no
# cache simulation): a figure that does not move with the machine's load, unlike req/s. The
# same cases as bench/compare.sh, the proxies configured by the same functions
# (bench/proxies.sh), at 1 worker. For a change on the request path, measured against the
# build before it:
#
#   bench/instructions.sh                           # every case; fulcrum, nginx, HAProxy
#   BASELINE=/tmp/fulcrum-old bench/instructions.sh  # and an older build of fulcrum
#   CASES="round_robin close" bench/instructions.sh  # some cases (round_robin least_conn
#                                    # ip_hash close routes routes_off tcp tls
#                                    # tls_handshake h2 h2_backend backends_10k logs)
#   N=20000 CONNS=64 PROXIES="fulcrum nginx" bench/instructions.sh
#   PROFILE=/tmp/cg PROXIES=fulcrum CASES=close bench/instructions.sh   # callgrind profiles
#
# One worker each (nginx: `master_process off`, so one process; HAProxy: `nbthread 1`;
# fulcrum: `workers = 1`), over compare.sh's backends (one nginx answering a small 200).
#
# Two kinds of case:
#   requests   every case but close and tls_handshake: h2load sends N/4 and then, in a second
#              run, 5N/4 requests over CONNS keep-alive connections (HTTP/1.1, or HTTP/2 with
#              10 streams at once for h2; over TLS for tls), each run under cachegrind from the
#              proxy's start to its stop; the difference of the two totals over N is the cost
#              of one request, start-up, warm-up, shutdown and the connections' set-up (TLS
#              handshakes included) cancelled out.
#   seconds    close and tls_handshake: a new client connection for every request (wrk -H
#              'Connection: close', CLOSE_CONNS connections; over TLS for tls_handshake, where
#              wrk resumes its sessions), and routes and routes_off (wrk's keep-alive requests
#              spread over the 50 routes by its Lua script, CONNS connections, to the proxies
#              with the routes and without; h2load sends one Host only),
#              for CLOSE_SECONDS and then 5 × CLOSE_SECONDS; the
#              requests are counted exactly where they arrive, in the backends' access log
#              (each proxied request is one backend request; a request wrk abandons when its
#              time is up was still proxied, and is counted), and the difference of the two
#              totals over the difference of the two counts is the cost of one request and its
#              connection.
# From run to run (two runs, N=8000): fulcrum's keep-alive count repeats to within 0.1%; the
# close case's, and nginx's and HAProxy's, to within about 3%.
# What it does not see: time spent waiting (syscalls' own cost in the kernel, cache misses,
# contention): a build can execute fewer instructions and still be slower; req/s is
# compare.sh's to measure, this is what explains it.
#
# PROFILE=DIR: callgrind instead of cachegrind, and its output of the larger run kept as
# DIR/callgrind.<proxy>.<case> (`callgrind_annotate --inclusive=yes`, `--tree=caller` read it);
# the instructions it counts are the same as cachegrind's.
#
# Every process it starts is stopped on exit, by PID.
set -euo pipefail

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=bench/proxies.sh
. "$(dirname "$0")/proxies.sh"
# Resolved before the cd below, so a path relative to where it was run from still works.
resolve_baseline
PROFILE=${PROFILE:-}
if [ -n "$PROFILE" ]; then
    mkdir -p "$PROFILE"
    PROFILE=$(realpath "$PROFILE")
fi
cd "$(dirname "$0")/.."

N=${N:-20000}                       # requests cases: requests the difference is taken over
CONNS=${CONNS:-64}                  # requests cases: client connections
CLOSE_SECONDS=${CLOSE_SECONDS:-3}   # seconds cases: the shorter run's length
CLOSE_CONNS=${CLOSE_CONNS:-8}       # seconds cases: client connections at once
PROXIES=${PROXIES:-"fulcrum nginx haproxy"}
ALL_CASES="round_robin least_conn ip_hash close routes routes_off tcp tls tls_handshake h2 h2_backend backends_10k logs"
CASES=${CASES:-$ALL_CASES}
for case in $CASES; do
    if [[ " $ALL_CASES " != *" $case "* ]]; then
        echo "error: CASES: unknown case $case; the cases are: $ALL_CASES" >&2
        exit 1
    fi
done
PORT_BACKEND=${PORT_BACKEND:-19401}   # 3 ports from here
PORT_PROXY=${PORT_PROXY:-19410}
BACKEND_PORTS=("$PORT_BACKEND" $((PORT_BACKEND + 1)) $((PORT_BACKEND + 2)))

need nginx h2load valgrind wrk haproxy openssl
need_file /usr/lib/nginx/modules/ngx_stream_module.so libnginx-mod-stream
export PATH="$PATH:/usr/sbin"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
[ -x target/release/fulcrum ] || cargo build --release --locked -p fulcrum
REVISION=$(git rev-parse --short HEAD 2>/dev/null || echo '?')
if git status --porcelain -- crates Cargo.toml Cargo.lock 2>/dev/null | grep -q .; then
    REVISION="$REVISION with uncommitted changes"
fi

work_dir fulcrum-instructions
cp target/release/fulcrum "$WORK/fulcrum"
make_certificate
BACKEND_LOG=$WORK/backend-access.log
BACKENDS_PID=""

# algorithm_of CASE: what the proxies balance with, or the protocol case they are set up for.
algorithm_of() {
    case $1 in
        close) echo round_robin ;;
        routes) echo routes ;;
        routes_off) echo round_robin ;;
        tls_handshake) echo tls ;;
        backends_10k) echo least_conn ;;
        *) echo "$1" ;;
    esac
}

# start_case CASE: the backends for CASE (each request a line in BACKEND_LOG), and every
# proxy's configuration in WORK.
start_case() {
    local case=$1 alg i
    alg=$(algorithm_of "$case")
    BACKENDS=()
    if [ "$case" = backends_10k ]; then
        # compare.sh's backends_10k: 10,000 addresses of 127.0.0.0/8, one wildcard listener.
        for i in $(seq 0 9999); do BACKENDS+=("127.0.$((1 + i / 250)).$((1 + i % 250)):$PORT_BACKEND"); done
    else
        for i in "${BACKEND_PORTS[@]}"; do BACKENDS+=("127.0.0.1:$i"); done
    fi
    if [ -n "$BACKENDS_PID" ]; then
        kill "$BACKENDS_PID" 2>/dev/null || true
        wait "$BACKENDS_PID" 2>/dev/null || true
    fi
    mkdir -p "$WORK/backends/logs" "$WORK/proxy-nginx/logs"
    backends_config "$WORK/backends" 1 "$([ "$case" = h2_backend ] && echo " http2")" "$BACKEND_LOG" \
        >"$WORK/backends/nginx.conf"
    nginx -c "$WORK/backends/nginx.conf" -p "$WORK/backends" -g 'daemon off;' &
    BACKENDS_PID=$!
    PIDS+=("$BACKENDS_PID")
    wait_port "$PORT_BACKEND" 20
    local keepalive=1024
    [ "$case" != backends_10k ] || keepalive=4
    fulcrum_config "$alg" 1 "$PORT_PROXY" "$keepalive" >"$WORK/fulcrum.toml"
    nginx_config "$alg" 1 "$PORT_PROXY" "$WORK/proxy-nginx" one >"$WORK/proxy-nginx/nginx.conf"
    haproxy_config "$alg" 1 "$PORT_PROXY" >"$WORK/haproxy.cfg"
}

# command_of PROXY: COMMAND, how to start PROXY in the foreground (fulcrum, baseline, nginx,
# haproxy).
command_of() {
    case $1 in
        fulcrum) COMMAND=("$WORK/fulcrum" run --config "$WORK/fulcrum.toml") ;;
        baseline) COMMAND=("$BASELINE" run --config "$WORK/fulcrum.toml") ;;
        nginx) COMMAND=(nginx -c "$WORK/proxy-nginx/nginx.conf" -p "$WORK/proxy-nginx" -g 'daemon off;') ;;
        haproxy) COMMAND=(haproxy -f "$WORK/haproxy.cfg" -db) ;;
    esac
}

# by_seconds CASE: whether CASE is measured over time (wrk), its requests counted by the
# backends: a connection per request, or (routes) requests with many hosts, which h2load's
# single authority cannot send.
by_seconds() {
    [ "$1" = close ] || [ "$1" = tls_handshake ] || [ "$1" = routes ] || [ "$1" = routes_off ]
}

# load CASE SIZE: the client's part of one run (SIZE: requests, or seconds for by_seconds).
load() {
    local case=$1 size=$2 scheme=http
    case $case in tls | tls_handshake) scheme=https ;; esac
    local url=$scheme://127.0.0.1:$PORT_PROXY/
    if [ "$case" = routes ] || [ "$case" = routes_off ]; then
        routes_lua >"$WORK/routes.lua"
        wrk -t1 -c"$CONNS" -d"${size}s" -s "$WORK/routes.lua" "$url" >"$WORK/load.log" 2>&1
        if grep -q 'Non-2xx' "$WORK/load.log"; then
            echo "warning: $case: a request failed; no count for this proxy:" >&2
            grep -E 'Non-2xx|requests in' "$WORK/load.log" >&2
            return 1
        fi
        return
    fi
    if by_seconds "$case"; then
        wrk -t1 -c"$CLOSE_CONNS" -d"${size}s" -H 'Connection: close' "$url" >"$WORK/load.log" 2>&1
        if grep -q 'Non-2xx' "$WORK/load.log"; then
            echo "error: $case: a request failed:" >&2
            cat "$WORK/load.log" >&2
            exit 1
        fi
        return
    fi
    local protocol=(--h1)
    [ "$case" != h2 ] || protocol=(-m10)
    if ! h2load "${protocol[@]}" -n "$size" -c "$CONNS" "$url" >"$WORK/load.log" 2>&1 ||
        ! grep -q "$size succeeded" "$WORK/load.log"; then
        echo "warning: $case: not every request succeeded; no count for this proxy:" >&2
        grep -E '^(requests|status codes):' "$WORK/load.log" >&2
        return 1
    fi
}

# instructions PROXY CASE SIZE [KEEP]: "instructions requests", the instructions PROXY executed
# from start to stop over one run, and the requests the backends saw. KEEP: where to keep
# callgrind's output (with PROFILE).
instructions() {
    local proxy=$1 case=$2 size=$3 keep=${4:-/dev/null} log=$WORK/valgrind.log pid before after
    local tool=(--tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null)
    [ -z "$PROFILE" ] || tool=(--tool=callgrind "--callgrind-out-file=$keep")
    command_of "$proxy"
    # HAProxy's standard output is its access log in the logs case (`log stdout`).
    valgrind "${tool[@]}" "${COMMAND[@]}" >"$(access_log_file "$proxy")" 2>"$log" &
    pid=$!
    PIDS+=("$pid")
    wait_port "$PORT_PROXY" 60
    before=$(wc -l <"$BACKEND_LOG")
    local loaded=0
    load "$case" "$size" || loaded=$?
    kill -TERM "$pid"
    wait "$pid" || true
    if [ "$loaded" -ne 0 ]; then
        echo "  (the proxy's own words: $(tail -3 "$log" | tr '\n' ' '))" >&2
        echo "- -"
        return
    fi
    after=$(wc -l <"$BACKEND_LOG")
    # cachegrind says "I refs:", callgrind "Collected :".
    awk -v r=$((after - before)) '/I +refs:|Collected :/ { gsub(",", "", $NF); print $NF, r }' "$log"
}

# per_request PROXY CASE: "instructions-per-request requests", from two runs.
per_request() {
    local proxy=$1 case=$2 keep=/dev/null i1 i2 r1 r2
    [ -z "$PROFILE" ] || keep=$PROFILE/callgrind.$proxy.$case
    if by_seconds "$case"; then
        read -r i1 r1 <<<"$(instructions "$proxy" "$case" "$CLOSE_SECONDS")"
        read -r i2 r2 <<<"$(instructions "$proxy" "$case" $((5 * CLOSE_SECONDS)) "$keep")"
    else
        read -r i1 r1 <<<"$(instructions "$proxy" "$case" $((N / 4)))"
        read -r i2 r2 <<<"$(instructions "$proxy" "$case" $((N / 4 + N)) "$keep")"
        r1=0 r2=$N
    fi
    # A run that failed: no count ("–" in the table).
    if [ "$i1" = - ] || [ "$i2" = - ]; then
        echo "– 0"
        return
    fi
    echo "$(((i2 - i1) / (r2 - r1))) $((r2 - r1))"
}

names=()
for proxy in $PROXIES; do names+=("$proxy"); done
[ -z "$BASELINE" ] || names+=(baseline)
echo "instructions per request, 1 worker; requests cases: $CONNS connections, over $N requests;"
echo "close and tls_handshake: a connection per request, $CLOSE_CONNS at once; fulcrum at $REVISION"
echo
echo "| case | proxy | instructions/request | requests |"
echo "|---|---|---|---|"
declare -A result
for case in $CASES; do
    start_case "$case"
    for proxy in "${names[@]}"; do
        read -r per count <<<"$(per_request "$proxy" "$case")"
        result[$proxy.$case]=$per
        echo "| $case | $proxy | $per | $count |"
    done
done
echo
for case in $CASES; do
    for proxy in "${names[@]}"; do
        [ "$proxy" != fulcrum ] || continue
        [ "${result[fulcrum.$case]:-–}" != – ] || continue
        [ "${result[$proxy.$case]:-–}" != – ] || continue
        awk -v h="${result[fulcrum.$case]}" -v b="${result[$proxy.$case]}" -v p="$proxy" -v c="$case" \
            'BEGIN { printf "%s: fulcrum / %s: %.3f\n", c, p, h / b }'
    done
done
