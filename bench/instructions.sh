#!/usr/bin/env bash
# Instructions each proxy executes per proxied request, counted by valgrind (cachegrind, no
# cache simulation): a figure that does not move with the machine's load, unlike req/s. For a
# change on the request path, measured against the build before it:
#
#   BASELINE=/tmp/fulcrum-old bench/instructions.sh
#   N=20000 CONNS=64 BASELINE=... bench/instructions.sh
#   PROXIES="fulcrum nginx haproxy" MODES="keepalive close" bench/instructions.sh   # the default
#   PROFILE=/tmp/cg PROXIES=fulcrum MODES=close bench/instructions.sh   # callgrind profiles
#   ALGORITHM=least_conn bench/instructions.sh   # or ip_hash (nginx ip_hash, HAProxy source)
#
# The same set-up for every proxy: one worker (nginx: `master_process off`, so one process;
# HAProxy: `nbthread 1`; fulcrum: `workers = 1`), ALGORITHM (round_robin by default) over 3
# nginx backends (a small 200), keep-alive to the backends, X-Forwarded-For added, access log
# off (compare.sh's round_robin, least_conn, ip_hash and close cases).
#
# MODES:
#   keepalive  h2load sends N/4 and then, in a second run, 5N/4 HTTP/1.1 requests over CONNS
#              keep-alive connections, each run under cachegrind from the proxy's start to its
#              stop; the difference of the two totals over N is the cost of one request,
#              start-up, warm-up and shutdown cancelled out.
#   close      a new client connection for every request (wrk -H 'Connection: close', CLOSE_CONNS
#              connections), for CLOSE_SECONDS and then 5 × CLOSE_SECONDS; the requests are
#              counted exactly where they arrive, in the backends' access log (each proxied
#              request is one backend request; a request wrk abandons when its time is up was
#              still proxied, and is counted), and the difference of the two totals over the
#              difference of the two counts is the cost of one request and its connection.
# From run to run (two runs, N=8000): fulcrum's keepalive count repeats to within 0.1%; the
# close mode's, and nginx's and HAProxy's, to within about 3%.
# What it does not see: time spent waiting (syscalls' own cost in the kernel, cache misses,
# contention): a build can execute fewer instructions and still be slower; req/s is
# compare.sh's to measure, this is what explains it.
#
# PROFILE=DIR: callgrind instead of cachegrind, and its output of the larger run kept as
# DIR/callgrind.<proxy>.<mode> (`callgrind_annotate --inclusive=yes`, `--tree=caller` read it);
# the instructions it counts are the same as cachegrind's.
#
# Every process it starts is stopped on exit, by PID.
set -euo pipefail

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
# Resolved before the cd below, so a path relative to where it was run from still works.
resolve_baseline
PROFILE=${PROFILE:-}
if [ -n "$PROFILE" ]; then
    mkdir -p "$PROFILE"
    PROFILE=$(realpath "$PROFILE")
fi
cd "$(dirname "$0")/.."

N=${N:-20000}                       # keepalive: requests the difference is taken over
CONNS=${CONNS:-64}                  # keepalive: client connections
CLOSE_SECONDS=${CLOSE_SECONDS:-3}   # close: the shorter run's length
CLOSE_CONNS=${CLOSE_CONNS:-8}       # close: client connections at once
PROXIES=${PROXIES:-"fulcrum nginx haproxy"}
ALGORITHM=${ALGORITHM:-round_robin}   # round_robin, least_conn or ip_hash
case $ALGORITHM in
    round_robin) NGINX_BALANCE="" HAPROXY_BALANCE=roundrobin ;;
    least_conn) NGINX_BALANCE="least_conn;" HAPROXY_BALANCE=leastconn ;;
    ip_hash) NGINX_BALANCE="ip_hash;" HAPROXY_BALANCE=source ;;
    *)
        echo "error: ALGORITHM=$ALGORITHM: round_robin, least_conn or ip_hash" >&2
        exit 1
        ;;
esac
MODES=${MODES:-"keepalive close"}
PORT_BACKEND=${PORT_BACKEND:-19401}   # 3 ports from here
PORT_PROXY=${PORT_PROXY:-19410}

need nginx h2load valgrind wrk haproxy
export PATH="$PATH:/usr/sbin"
[ -x target/release/fulcrum ] || cargo build --release --locked -p fulcrum
REVISION=$(git rev-parse --short HEAD 2>/dev/null || echo '?')
if git status --porcelain -- crates Cargo.toml Cargo.lock 2>/dev/null | grep -q .; then
    REVISION="$REVISION with uncommitted changes"
fi

work_dir fulcrum-instructions
cp target/release/fulcrum "$WORK/fulcrum"
BACKEND_LOG=$WORK/backend-access.log

# The backends log every request they answer: that is how the close mode counts.
{
    echo "worker_processes 1;"
    echo "daemon off;"
    echo "pid $WORK/nginx.pid;"
    echo "error_log $WORK/nginx-error.log;"
    echo "events { worker_connections 4096; }"
    echo "http {"
    echo "  log_format n '.';"
    echo "  access_log $BACKEND_LOG n;"
    echo "  keepalive_requests 1000000;"
    echo "  client_body_temp_path $WORK; proxy_temp_path $WORK; fastcgi_temp_path $WORK;"
    echo "  uwsgi_temp_path $WORK; scgi_temp_path $WORK;"
    for i in 0 1 2; do
        port=$((PORT_BACKEND + i))
        echo "  server { listen 127.0.0.1:$port; location / { return 200 \"backend $port\\n\"; } }"
    done
    echo "}"
} >"$WORK/nginx.conf"
nginx -c "$WORK/nginx.conf" -p "$WORK" -e "$WORK/nginx-error.log" &
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
    echo "algorithm = \"$ALGORITHM\""
    echo "keepalive = 1024"
    for i in 0 1 2; do
        echo "[[upstream.backend]]"
        echo "addr = \"127.0.0.1:$((PORT_BACKEND + i))\""
    done
} >"$WORK/fulcrum.toml"

# compare.sh's nginx proxy, as one process (no master) so that valgrind follows all of it.
mkdir -p "$WORK/proxy-nginx/logs"
{
    echo "worker_processes 1; master_process off; daemon off;"
    echo "pid $WORK/proxy-nginx/nginx.pid; error_log $WORK/proxy-nginx/logs/error.log warn;"
    echo "events { worker_connections 4096; }"
    echo "http { access_log off; keepalive_requests 1000000; keepalive_timeout 60s;"
    echo "  client_body_temp_path $WORK; proxy_temp_path $WORK; fastcgi_temp_path $WORK;"
    echo "  uwsgi_temp_path $WORK; scgi_temp_path $WORK;"
    echo "  upstream b { $NGINX_BALANCE"
    for i in 0 1 2; do echo "    server 127.0.0.1:$((PORT_BACKEND + i));"; done
    echo "    keepalive 1024; keepalive_requests 1000000; }"
    echo "  server { listen 127.0.0.1:$PORT_PROXY; location / {"
    echo "    proxy_pass http://b; proxy_http_version 1.1; proxy_set_header Connection \"\";"
    echo "    proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for; } }"
    echo "}"
} >"$WORK/proxy-nginx/nginx.conf"

# compare.sh's HAProxy.
{
    echo "global"
    echo "  nbthread 1"
    echo "  maxconn 8000"
    echo "defaults"
    echo "  mode http"
    echo "  option http-keep-alive"
    echo "  option forwardfor"
    echo "  timeout connect 5s"
    echo "  timeout client 60s"
    echo "  timeout server 60s"
    echo "frontend f"
    echo "  bind 127.0.0.1:$PORT_PROXY"
    echo "  default_backend b"
    echo "backend b"
    echo "  balance $HAPROXY_BALANCE"
    echo "  http-reuse always"
    for i in 0 1 2; do echo "  server s$i 127.0.0.1:$((PORT_BACKEND + i)) maxconn 4000"; done
} >"$WORK/haproxy.cfg"

# command PROXY: how to start PROXY in the foreground (fulcrum, baseline, nginx, haproxy).
command_of() {
    case $1 in
        fulcrum) echo "$WORK/fulcrum run --config $WORK/fulcrum.toml" ;;
        baseline) echo "$BASELINE run --config $WORK/fulcrum.toml" ;;
        nginx) echo "nginx -c $WORK/proxy-nginx/nginx.conf -p $WORK/proxy-nginx" ;;
        haproxy) echo "haproxy -f $WORK/haproxy.cfg -db" ;;
    esac
}

# load MODE SIZE: the client's part of one run (SIZE: requests for keepalive, seconds for close).
load() {
    local mode=$1 size=$2
    if [ "$mode" = keepalive ]; then
        if ! h2load --h1 -n "$size" -c "$CONNS" "http://127.0.0.1:$PORT_PROXY/" >"$WORK/load.log" 2>&1 ||
            ! grep -q "$size succeeded" "$WORK/load.log"; then
            echo "error: not every request succeeded:" >&2
            cat "$WORK/load.log" >&2
            exit 1
        fi
    else
        wrk -t1 -c"$CLOSE_CONNS" -d"${size}s" -H 'Connection: close' \
            "http://127.0.0.1:$PORT_PROXY/" >"$WORK/load.log" 2>&1
        if grep -q 'Non-2xx' "$WORK/load.log"; then
            echo "error: a request failed:" >&2
            cat "$WORK/load.log" >&2
            exit 1
        fi
    fi
}

# instructions PROXY MODE SIZE [KEEP]: "instructions requests", the instructions PROXY executed
# from start to stop over one run, and the requests the backends saw. KEEP: where to keep
# callgrind's output (with PROFILE).
instructions() {
    local proxy=$1 mode=$2 size=$3 keep=${4:-/dev/null} log=$WORK/valgrind.log pid before after
    local tool=(--tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null)
    [ -z "$PROFILE" ] || tool=(--tool=callgrind "--callgrind-out-file=$keep")
    # shellcheck disable=SC2046
    valgrind "${tool[@]}" $(command_of "$proxy") 2>"$log" &
    pid=$!
    PIDS+=("$pid")
    wait_port "$PORT_PROXY" 30
    before=$(wc -l <"$BACKEND_LOG")
    load "$mode" "$size"
    kill -TERM "$pid"
    wait "$pid" || true
    after=$(wc -l <"$BACKEND_LOG")
    # cachegrind says "I refs:", callgrind "Collected :".
    awk -v r=$((after - before)) '/I +refs:|Collected :/ { gsub(",", "", $NF); print $NF, r }' "$log"
}

# per_request PROXY MODE: instructions per request, from two runs.
per_request() {
    local proxy=$1 mode=$2 small large keep=/dev/null
    [ -z "$PROFILE" ] || keep=$PROFILE/callgrind.$proxy.$mode
    if [ "$mode" = keepalive ]; then
        read -r i1 _ <<<"$(instructions "$proxy" "$mode" $((N / 4)))"
        read -r i2 _ <<<"$(instructions "$proxy" "$mode" $((N / 4 + N)) "$keep")"
        echo "$(((i2 - i1) / N)) $N"
    else
        read -r i1 r1 <<<"$(instructions "$proxy" "$mode" "$CLOSE_SECONDS")"
        read -r i2 r2 <<<"$(instructions "$proxy" "$mode" $((5 * CLOSE_SECONDS)) "$keep")"
        echo "$(((i2 - i1) / (r2 - r1))) $((r2 - r1))"
    fi
}

names=()
for proxy in $PROXIES; do names+=("$proxy"); done
[ -z "$BASELINE" ] || names+=(baseline)
echo "instructions per request, $ALGORITHM, 1 worker; keepalive: $CONNS connections, over $N requests;"
echo "close: a connection per request, $CLOSE_CONNS at once; fulcrum at $REVISION"
echo
echo "| mode | proxy | instructions/request | requests |"
echo "|---|---|---|---|"
declare -A result
for mode in $MODES; do
    for proxy in "${names[@]}"; do
        read -r per count <<<"$(per_request "$proxy" "$mode")"
        result[$proxy.$mode]=$per
        echo "| $mode | $proxy | $per | $count |"
    done
done
echo
for mode in $MODES; do
    for proxy in "${names[@]}"; do
        [ "$proxy" != fulcrum ] || continue
        [ -n "${result[fulcrum.$mode]:-}" ] || continue
        awk -v h="${result[fulcrum.$mode]}" -v b="${result[$proxy.$mode]}" -v p="$proxy" -v m="$mode" \
            'BEGIN { printf "%s: fulcrum / %s: %.3f\n", m, p, h / b }'
    done
done
