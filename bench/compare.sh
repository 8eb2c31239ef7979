#!/usr/bin/env bash
# fulcrum head to head with nginx and HAProxy, on this machine, in one run.
#
#   bench/compare.sh            # the full run (about 8 minutes on 2 cores)
#   DURATION=2 REPS=3 bench/compare.sh   # a quicker look
#   WORKERS=1 CONNS=64 bench/compare.sh  # one configuration
#   CASES="tcp h2" bench/compare.sh      # only some cases (round_robin least_conn ip_hash close
#                                        # routes routes_off tcp tls tls_handshake h2 h2_backend
#                                        # backends_10k logs)
#   BASELINE=/tmp/fulcrum-old bench/compare.sh  # also an older fulcrum build (about 11 minutes)
#   FULCRUM_BIN=target/pgo/fulcrum bench/compare.sh  # measure that build as fulcrum (bench/pgo.sh's
#                                        # profile-guided one), instead of building target/release
#   PEERS=nginx bench/compare.sh         # which peers run beside fulcrum (default "nginx haproxy";
#                                        # "" for none: bench/pgo.sh's training)
#   OUT=/tmp/run.md bench/compare.sh     # where the table goes (default bench/results/<date>-<host>.md)
#
# BASELINE: another fulcrum binary (say, built from the commit before a change) measured as a
# fourth contender, `baseline`, configured exactly like fulcrum, on its own port. Comparing two
# builds across separate runs mixes the change with the machine's drift from one run to the
# next (absolute rates move by 10% and more here); measured in the same run, interleaved with
# the others, the ratio fulcrum / baseline is what the change did. Unset, nothing of it runs.
#
# What it does (docs/performance.md explains the method):
#   * installs nginx, haproxy and wrk from Debian's packages if they are missing;
#   * starts one nginx as the backends: 3 ports on 127.0.0.1 answering a small 200 (1 worker
#     process when pinned beside wrk, 2 otherwise);
#   * starts fulcrum, nginx and HAProxy as proxies, configured alike: round robin over the same
#     3 backends, keep-alive to clients and to the backends, X-Forwarded-For added, access logs
#     off, the same number of workers (processes for nginx, threads for HAProxy and fulcrum);
#     with BASELINE, that binary too, as `baseline`, with fulcrum's configuration;
#   * for each worker count (1, 2) and connection count (64, 256), runs `wrk --latency` against
#     each proxy in turn, REPS times after a warm-up, interleaved and rotated (A B C, B C A,
#     C A B, ...), then the same against one backend directly (the ceiling);
#   * runs least_conn and a hash algorithm (client address) the same way, at 1 worker, and
#     `close`, round robin with a new connection for every request (`Connection: close`): what
#     accepting and closing a connection costs; and `routes`, round robin behind 50 routes
#     (10 hosts, exact, prefix, `^~` and regex paths: fulcrum's `[[listener.route]]`, nginx's
#     `server`s and `location`s, HAProxy's `use_backend` rules), wrk's requests spread over
#     them by a Lua script, and `routes_off`, the same requests to the proxies without routes:
#     what choosing the route costs; and `logs`, round robin with every proxy's access log on,
#     to a file (nginx's `access_log` in its default `combined` format, HAProxy's `log stdout`
#     with `option httplog` sent to a file, fulcrum's `access_log` in `combined`): against
#     round_robin, what the log line costs;
#   * runs TCP (L4) mode the same way, at 1 and 2 workers: fulcrum's `protocol = "tcp"`, nginx's
#     `stream` module and HAProxy's `mode tcp`, round robin over the same backends; wrk's
#     keep-alive HTTP requests go through the byte relay, so req/s measures the relay;
#   * runs TLS termination at 1 worker (a self-signed P-256 certificate): `tls`, wrk's
#     keep-alive requests over HTTPS; `tls_handshake`, a new connection and handshake for every
#     request (wrk resumes its sessions); and `h2`, HTTP/2 with prior knowledge driven by h2load
#     (nghttp2-client), 10 streams per connection; backends stay HTTP/1.1;
#   * runs HTTP/2 to the backends (`h2_backend`), at 1 worker: the backends speak h2c only,
#     wrk speaks HTTP/1.1 to the proxies; fulcrum's `backend_protocol = "h2"`, nginx's
#     `grpc_pass` (its one module that speaks HTTP/2 upstream; it carries plain requests too)
#     and HAProxy's `proto h2` on its servers;
#   * counts, during each measured run, the system calls of each proxy's processes and threads
#     (perf stat on the tracepoint raw_syscalls:sys_enter; SYSCALLS=0 turns it off) and, where
#     the CPU's counters can be read, its user-space instructions; splits its CPU time into
#     user and system (/proc/<pid>/stat); all per request in the table;
#   * prints one table of medians, and writes it to bench/results/<date>-<host>.md
#     (<date>-<host>-baseline.md with BASELINE, so it does not replace a run without one).
#
# Pinning: with 1 worker, the proxies run on CPU 1 and wrk plus the backends on CPU 0, so the
# proxy has a core to itself and is what limits the rate. With 2 workers nothing is pinned (the
# machine has 2 cores; everything shares them), as an operator would run it.
#
# Every process it starts is stopped on exit, by PID.
set -euo pipefail

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=bench/proxies.sh
. "$(dirname "$0")/proxies.sh"
# Resolved before the cd below, so a path relative to where it was run from still works.
resolve_baseline
FULCRUM_BIN=${FULCRUM_BIN:-}
resolve_executable FULCRUM_BIN
PEERS=${PEERS-nginx haproxy}
for peer in $PEERS; do
    case $peer in
    nginx | haproxy) ;;
    *)
        echo "error: PEERS=\"$PEERS\": the peers are nginx and haproxy" >&2
        exit 1
        ;;
    esac
done
[ -z "${OUT:-}" ] || OUT=$(realpath -m "$OUT")
cd "$(dirname "$0")/.."

DURATION=${DURATION:-4}     # seconds per measured run
WARMUP=${WARMUP:-2}         # seconds of warm-up per proxy and configuration
REPS=${REPS:-5}             # interleaved repetitions (medians of 5 resist the shared machine's noise)
WORKERS=${WORKERS:-"1 2"}
CONNS=${CONNS:-"64 256"}
CASES=${CASES:-"round_robin least_conn ip_hash close routes routes_off tcp tls tls_handshake h2 h2_backend backends_10k logs"}   # which cases run (all by default)

BACKEND_PORTS=(19101 19102 19103)
# The backends' addresses in the proxies' configurations: one per port, or (backends_10k)
# 10,000 addresses of 127.0.0.0/8, all loopback, answered by one nginx on a wildcard address.
BACKENDS=()
KEEPALIVE=1024   # fulcrum's idle connections kept per backend
set_backends() {
    BACKENDS=()
    local port i
    if [ "$1" = backends_10k ]; then
        for i in $(seq 0 9999); do BACKENDS+=("127.0.$((1 + i / 250)).$((1 + i % 250)):${BACKEND_PORTS[0]}"); done
        KEEPALIVE=4
    else
        for port in "${BACKEND_PORTS[@]}"; do BACKENDS+=("127.0.0.1:$port"); done
        KEEPALIVE=1024
    fi
}
PORT_FULCRUM=19181
PORT_NGINX=19182
PORT_HAPROXY=19183
PORT_BASELINE=19184

need nginx haproxy wrk openssl
command -v h2load >/dev/null 2>&1 || need_file /usr/bin/h2load nghttp2-client
need_file /usr/lib/nginx/modules/ngx_stream_module.so libnginx-mod-stream
export PATH="$PATH:/usr/sbin"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

PORTS=("${BACKEND_PORTS[@]}" "$PORT_FULCRUM" "$PORT_NGINX" "$PORT_HAPROXY")
[ -z "$BASELINE" ] || PORTS+=("$PORT_BASELINE")
for port in "${PORTS[@]}"; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        echo "error: 127.0.0.1:$port is in use; stop what listens there and run again" >&2
        exit 1
    fi
done

if [ -z "$FULCRUM_BIN" ]; then
    echo "building fulcrum (release)..." >&2
    cargo build --release --locked -p fulcrum -q
fi
# The commit measured, taken now: the checkout may move on while the run goes.
REVISION=$(git rev-parse --short HEAD 2>/dev/null || echo '?')
if git status --porcelain -- crates Cargo.toml Cargo.lock 2>/dev/null | grep -q .; then
    REVISION="$REVISION with uncommitted changes"
fi
[ -z "$FULCRUM_BIN" ] || REVISION="$REVISION, measured as $FULCRUM_BIN (sha256 $(sha256sum "$FULCRUM_BIN" | cut -c1-12))"

work_dir fulcrum-bench

# A copy, so that a rebuild in this checkout during the run does not swap the binary between
# cases.
cp "${FULCRUM_BIN:-target/release/fulcrum}" "$WORK/fulcrum"
FULCRUM=$WORK/fulcrum

CLK_TCK=$(getconf CLK_TCK)
CORES=$(nproc)

# The PIDs of a process and its children (nginx's master and workers).
family() {
    echo "$1"
    pgrep -P "$1" 2>/dev/null || true
}

# CPU time of a process and its children, in clock ticks: "user system".
cpu_ticks() {
    local user=0 system=0 pid
    for pid in $(family "$1"); do
        # Fields after the command name, which is in parentheses: utime is the 12th, stime the 13th.
        local rest fields
        rest=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null) || continue
        read -ra fields <<<"$rest"
        user=$((user + fields[11]))
        system=$((system + fields[12]))
    done
    echo "$user $system"
}

# What perf counts over each measured run, per proxy (all its processes and threads): system
# calls (the tracepoint raw_syscalls:sys_enter, which virtual machines without hardware
# counters still have) and, where the CPU's counters are available, user-space instructions.
# SYSCALLS=0 turns it off (the counting costs the proxies a little on every system call).
SYSCALLS=${SYSCALLS:-1}
PERF_EVENTS=""
if [ "$SYSCALLS" != 0 ] && command -v perf >/dev/null 2>&1; then
    if perf stat -x, -e raw_syscalls:sys_enter -- true 2>/dev/null; then
        PERF_EVENTS=raw_syscalls:sys_enter
        if perf stat -x, -e instructions:u -- true 2>&1 >/dev/null | grep -q '^[0-9]'; then
            PERF_EVENTS="$PERF_EVENTS,instructions:u"
        fi
    fi
fi
[ -n "$PERF_EVENTS" ] || [ "$SYSCALLS" = 0 ] ||
    echo "note: perf cannot count system calls here (install linux-perf, run as root); those columns stay empty" >&2

# perf_start PID: starts counting PERF_EVENTS on PID and its children (PERF_PID; nothing
# without PERF_EVENTS or for the backends alone, PID -).
perf_start() {
    PERF_PID=""
    [ -n "$PERF_EVENTS" ] && [ "$1" != - ] || return 0
    perf stat -x, -e "$PERF_EVENTS" -p "$(family "$1" | paste -sd,)" -o "$WORK/perf.out" &
    PERF_PID=$!
    # perf attaches to each thread before it counts; what it misses of an idle proxy is little.
    # Not in PIDS: it ends by itself when the proxy does.
    sleep 0.2
}

# perf_stop: COUNTED, "syscalls instructions" counted since perf_start ("-" for what was
# not). Not in a subshell: perf is this shell's child, to be waited for (it writes its counts
# as it exits).
perf_stop() {
    COUNTED="- -"
    [ -n "$PERF_PID" ] || return 0
    kill -INT "$PERF_PID" 2>/dev/null || true
    wait "$PERF_PID" 2>/dev/null || true
    COUNTED=$(awk -F, '
        $3 == "raw_syscalls:sys_enter" && $1 ~ /^[0-9]+$/ { sys = $1 }
        $3 == "instructions:u" && $1 ~ /^[0-9]+$/ { ins = $1 }
        END { print (sys == "" ? "-" : sys), (ins == "" ? "-" : ins) }' "$WORK/perf.out")
}

# Peak resident memory (VmHWM) of a process and its children, in KiB.
peak_rss_kib() {
    local total=0 pid kib
    for pid in $(family "$1"); do
        kib=$(awk '/^VmHWM:/ { print $2 }' "/proc/$pid/status" 2>/dev/null || echo 0)
        total=$((total + ${kib:-0}))
    done
    echo "$total"
}


# pin CPULIST: the taskset prefix for a command, or nothing.
pin() {
    if [ -n "$1" ] && [ "$CORES" -ge 2 ]; then echo "taskset -c $1"; fi
}

# start_backends CPUS [LISTEN]: LISTEN is added to each `listen` (" http2": h2c only).
start_backends() {
    local cpus=$1 listen=${2:-} dir=$WORK/backends procs=2 port
    # Pinned to one CPU (beside wrk), one worker process is the fastest backend.
    [ -n "$cpus" ] && procs=1
    mkdir -p "$dir/logs"
    backends_config "$dir" "$procs" "$listen" >"$dir/nginx.conf"
    $(pin "$cpus") nginx -c "$dir/nginx.conf" -p "$dir" -g 'daemon off;' &
    BACKENDS_PID=$!
    PIDS+=("$BACKENDS_PID")
    for port in "${BACKEND_PORTS[@]}"; do
        wait_port "$port"
        if [ "${#BACKENDS[@]}" -gt 3 ]; then break; fi
    done
}

stop() {
    kill "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}

# start_fulcrum WORKERS ALGORITHM CPUS [NAME BINARY PORT]
# The same configuration for this checkout's build and for BASELINE; only the port differs.
start_fulcrum() {
    local workers=$1 alg=$2 cpus=$3 name=${4:-fulcrum} bin=${5:-$FULCRUM} listen=${6:-$PORT_FULCRUM}
    local conf=$WORK/$name.toml
    fulcrum_config "$alg" "$workers" "$listen" "$KEEPALIVE" >"$conf"
    # The baseline's access log (logs case) is its own file.
    sed -i "s|$(access_log_file fulcrum)|$(access_log_file "$name")|" "$conf"
    # A configuration the build refuses (a protocol it does not have) is said, not waited for.
    if ! "$bin" check --config "$conf" >"$WORK/$name.check" 2>&1; then
        if [ "$name" = fulcrum ]; then
            echo "error: this build refuses the $alg configuration:" >&2
            cat "$WORK/$name.check" >&2
            exit 1
        fi
        return 1
    fi
    RUST_LOG=warn $(pin "$cpus") "$bin" run --config "$conf" 2>"$WORK/$name.log" &
    PROXY_PID[$name]=$!
    PIDS+=("$!")
    wait_port "$listen"
}

# start_nginx WORKERS ALGORITHM CPUS
start_nginx() {
    local workers=$1 alg=$2 cpus=$3 dir=$WORK/nginx
    mkdir -p "$dir/logs"
    nginx_config "$alg" "$workers" "$PORT_NGINX" "$dir" >"$dir/nginx.conf"
    $(pin "$cpus") nginx -c "$dir/nginx.conf" -p "$dir" -g 'daemon off;' &
    PROXY_PID[nginx]=$!
    PIDS+=("$!")
    wait_port $PORT_NGINX
}

# start_haproxy WORKERS ALGORITHM CPUS
start_haproxy() {
    local workers=$1 alg=$2 cpus=$3 conf=$WORK/haproxy.cfg
    haproxy_config "$alg" "$workers" "$PORT_HAPROXY" >"$conf"
    # Its standard output is its access log in the logs case (`log stdout`).
    $(pin "$cpus") haproxy -f "$conf" -db >>"$(access_log_file haproxy)" 2>"$WORK/haproxy.log" &
    PROXY_PID[haproxy]=$!
    PIDS+=("$!")
    wait_port $PORT_HAPROXY
}

declare -A PROXY_PID PROXY_PORT=([fulcrum]=$PORT_FULCRUM [nginx]=$PORT_NGINX [haproxy]=$PORT_HAPROXY [baseline]=$PORT_BASELINE)
# case workers conns proxy rep rps p50_us p99_us cpu_s rss_kib requests user_s sys_s syscalls
# instructions (the last two "-" where perf did not count them)
RAW=$WORK/raw.tsv

# Latency as wrk prints it (e.g. 812.00us, 1.20ms, 2.01s) in microseconds.
to_us() {
    awk -v v="$1" 'BEGIN {
        n = v + 0
        if (v ~ /us$/) print n; else if (v ~ /ms$/) print n * 1000; else if (v ~ /s$/) print n * 1000000; else print n
    }'
}

# url CASE PORT: what the load generator asks for.
url() {
    case $1 in
        tls | tls_handshake) echo "https://127.0.0.1:$2/" ;;
        *) echo "http://127.0.0.1:$2/" ;;
    esac
}

# measure CASE WORKERS CONNS NAME REP PORT PID WRK_CPUS WRK_THREADS
measure() {
    local case=$1 workers=$2 conns=$3 name=$4 rep=$5 port=$6 pid=$7 cpus=$8 threads=$9
    local before after out rps p50 p99 requests errors
    before="0 0" after="0 0"
    perf_start "$pid"
    if [ "$pid" != - ]; then before=$(cpu_ticks "$pid"); fi
    if [ "$case" = h2 ]; then
        # h2load: 10 streams at once on each connection; it reports no percentiles (0 below).
        out=$($(pin "$cpus") h2load -t"$threads" -c"$conns" -m10 -D"$DURATION" "http://127.0.0.1:$port/" 2>&1)
        if [ "$pid" != - ]; then after=$(cpu_ticks "$pid"); fi
        perf_stop
        rps=$(awk '/^finished in/ { gsub(",", ""); print $4 }' <<<"$out")
        p50=0 p99=0
        requests=$(awk '/^requests:/ { print $2 }' <<<"$out")
        errors=$(awk '/^requests:/ && ($10 + 0 > 0 || $12 + 0 > 0) { print }' <<<"$out")
    else
        out=$($(pin "$cpus") wrk "${WRK_ARGS[@]}" -t"$threads" -c"$conns" -d"${DURATION}s" --latency "$(url "$case" "$port")")
        if [ "$pid" != - ]; then after=$(cpu_ticks "$pid"); fi
        perf_stop
        rps=$(awk '/^Requests\/sec:/ { print $2 }' <<<"$out")
        p50=$(to_us "$(awk '$1 == "50%" { print $2 }' <<<"$out")")
        p99=$(to_us "$(awk '$1 == "99%" { print $2 }' <<<"$out")")
        requests=$(awk '/requests in/ { print $1 }' <<<"$out")
        errors=$(awk '/Non-2xx|Socket errors/ { print }' <<<"$out")
    fi
    if [ -n "$errors" ]; then
        echo "warning: $name ($case, $workers workers, $conns conns): $errors" >&2
    fi
    local cpu_s user_s sys_s rss
    read -r user_s sys_s cpu_s < <(awk -v b="$before" -v a="$after" -v hz="$CLK_TCK" 'BEGIN {
        split(b, x, " "); split(a, y, " ")
        printf "%.3f %.3f %.2f\n", (y[1] - x[1]) / hz, (y[2] - x[2]) / hz, (y[1] + y[2] - x[1] - x[2]) / hz }')
    rss=0
    if [ "$pid" != - ]; then rss=$(peak_rss_kib "$pid"); fi
    local syscalls instructions
    read -r syscalls instructions <<<"$COUNTED"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
        "$case" "$workers" "$conns" "$name" "$rep" "$rps" "$p50" "$p99" "$cpu_s" "$rss" "$requests" \
        "$user_s" "$sys_s" "$syscalls" "$instructions" >>"$RAW"
    printf '  %-8s %-10s w=%s c=%-3s rep %s: %9.0f req/s  p99 %7.0f us  cpu %5.2f s\n' \
        "$case" "$name" "$workers" "$conns" "$rep" "$rps" "$p99" "$cpu_s" >&2
}

# empty_logs: the logs case's access logs emptied (every writer appends), after each run: on
# tmpfs a file is memory, and with the files growing through the case (about 100 MB a proxy)
# every proxy's CPU per request rose with them, by 2.5 µs from the third rep on, all four
# alike; emptied, each run's lines cost what they cost.
empty_logs() {
    local name file
    for name in fulcrum nginx haproxy baseline; do
        file=$(access_log_file "$name")
        [ ! -e "$file" ] || : >"$file"
    done
}

# run_case CASE ALGORITHM WORKERS CONNS...
run_case() {
    local case=$1 alg=$2 workers=$3
    shift 3
    local proxy_cpus="" client_cpus="" threads=2
    if [ "$workers" -eq 1 ]; then
        proxy_cpus=1 client_cpus=0 threads=1
    fi
    WRK_ARGS=()
    # A new connection, and so a TLS handshake, for every request; wrk keeps each
    # connection's session, so the handshakes after the first resume it.
    if [ "$case" = tls_handshake ] || [ "$case" = close ]; then WRK_ARGS=(-H "Connection: close"); fi
    # The routes case's requests, spread over its 50 routes (each with its Host); routes_off
    # sends the same requests to the proxies configured without routes.
    if [ "$case" = routes ] || [ "$case" = routes_off ]; then
        routes_lua >"$WORK/routes.lua"
        WRK_ARGS=(-s "$WORK/routes.lua")
    fi
    set_backends "$case"
    start_backends "$client_cpus" "$([ "$case" = h2_backend ] && echo " http2")"
    start_fulcrum "$workers" "$alg" "$proxy_cpus"
    local names=(fulcrum) conns name rep i peer
    for peer in $PEERS; do
        "start_$peer" "$workers" "$alg" "$proxy_cpus"
        names+=("$peer")
    done
    # An older build may not have this case's protocol: then it sits the case out.
    if [ -n "$BASELINE" ]; then
        if start_fulcrum "$workers" "$alg" "$proxy_cpus" baseline "$BASELINE" $PORT_BASELINE; then
            names+=(baseline)
        else
            echo "note: the baseline build refuses the $case configuration; it sits this case out" >&2
        fi
    fi
    for name in "${names[@]}"; do
        # Warm-up: connections to the backends opened, caches and allocators warm.
        if [ "$case" = h2 ]; then
            $(pin "$client_cpus") h2load -t"$threads" -c64 -m10 -D"$WARMUP" "http://127.0.0.1:${PROXY_PORT[$name]}/" >/dev/null 2>&1
        else
            $(pin "$client_cpus") wrk "${WRK_ARGS[@]}" -t"$threads" -c64 -d"${WARMUP}s" "$(url "$case" "${PROXY_PORT[$name]}")" >/dev/null
        fi
    done
    [ "$case" != logs ] || empty_logs
    for conns in "$@"; do
        for rep in $(seq 1 "$REPS"); do
            # Interleaved, and rotated: fulcrum nginx haproxy, nginx haproxy fulcrum, ... so no
            # proxy always runs first, or right after another (with BASELINE, over the four).
            for i in "${!names[@]}"; do
                name=${names[$(((i + rep - 1) % ${#names[@]}))]}
                measure "$case" "$workers" "$conns" "$name" "$rep" "${PROXY_PORT[$name]}" "${PROXY_PID[$name]}" "$client_cpus" "$threads"
                [ "$case" != logs ] || empty_logs
            done
        done
        # The ceiling, after the proxies: the backends run flat out here, and the scheduler
        # makes a process that just used much CPU wait longer afterwards (measured: a backend
        # worker held back 100 ms in the run that followed), which would hit whichever proxy
        # ran next.
        if [ "$case" = round_robin ]; then
            for rep in $(seq 1 "$REPS"); do
                measure "$case" "$workers" "$conns" direct "$rep" "${BACKEND_PORTS[0]}" - "$client_cpus" "$threads"
            done
        fi
    done
    for name in "${names[@]}"; do stop "${PROXY_PID[$name]}"; done
    stop "$BACKENDS_PID"
}

# Whether CASES names case $1.
wanted() {
    [[ " $CASES " == *" $1 "* ]]
}

STARTED=$(date +%s)
if wanted round_robin; then
    for workers in $WORKERS; do
        # shellcheck disable=SC2086
        run_case round_robin round_robin "$workers" $CONNS
    done
fi
if wanted least_conn; then run_case least_conn least_conn 1 64; fi
if wanted ip_hash; then run_case ip_hash ip_hash 1 64; fi
if wanted close; then run_case close round_robin 1 64; fi
# Round robin behind 50 routes (10 hosts; exact, prefix, `^~` and regex paths), against the
# round_robin case above: what choosing the route costs.
if wanted routes; then run_case routes routes 1 64; fi
if wanted routes_off; then run_case routes_off round_robin 1 64; fi
if wanted tcp; then
    for workers in $WORKERS; do
        run_case tcp tcp "$workers" 64
    done
fi
if wanted tls || wanted tls_handshake; then
    # One self-signed certificate for all three.
    make_certificate
    if wanted tls; then run_case tls tls 1 64; fi
    if wanted tls_handshake; then run_case tls_handshake tls 1 64; fi
fi
if wanted h2; then run_case h2 h2 1 64; fi
if wanted h2_backend; then run_case h2_backend h2_backend 1 64; fi
# least_conn over 10,000 backends (keepalive 4 each for fulcrum): the pick's cost and the
# connections' spread at scale, against the 3-backend least_conn case above.
if wanted backends_10k; then run_case backends_10k least_conn 1 64; fi
# Round robin with every proxy's access log on, to a file (bench/proxies.sh, access_log_file):
# against round_robin at 1 worker and 64 connections, what the log line costs each.
if wanted logs; then
    run_case logs logs 1 64
    for name in fulcrum nginx haproxy baseline; do rm -f "$(access_log_file "$name")"; done
fi

# The table: medians over the repetitions, then ratios of fulcrum to each peer.
RESULTS=bench/results
mkdir -p "$RESULTS"
OUT=${OUT:-"$RESULTS/$(date +%Y-%m-%d)-$(hostname -s)${BASELINE:+-baseline}.md"}
{
    echo "# fulcrum vs ${BASELINE:+baseline vs }nginx vs HAProxy — $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "* machine: $(hostname -s), $CORES cores ($(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)), $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), kernel $(uname -r)"
    echo "* peers: $(nginx -v 2>&1 | sed 's/^nginx version: //'), $(haproxy -v | head -1 | awk '{ print "HAProxy " $3 }'), $("$FULCRUM" --version), $(wrk -v 2>&1 | head -1 | awk '{ print $1, $2 }') (measured: fulcrum${PEERS:+ $PEERS})"
    echo "* fulcrum: $REVISION"
    if [ -n "$BASELINE" ]; then
        # Both builds may print the same version; the commit and the file's hash say which is which.
        echo "* baseline: $BASELINE ($("$BASELINE" --version), sha256 $(sha256sum "$BASELINE" | cut -c1-12))"
    fi
    echo "* method: wrk --latency, ${DURATION} s per run, ${REPS} interleaved repetitions after a ${WARMUP} s warm-up; medians."
    echo "  1 worker: proxies pinned to CPU 1, wrk and backends to CPU 0. 2 workers: no pinning."
    echo "* cpu µs/req: the proxy's user+system CPU time over the requests it served (lower is better)."
    echo "  peak RSS: VmHWM summed over the proxy's processes (nginx: master and workers)."
    if wanted h2; then echo "* h2: h2load reports no percentiles; its rows show 0 for p50 and p99."; fi
    echo "* user / sys µs/req: the same CPU time split (user space, kernel), each the median over the"
    echo "  repetitions of the run's time over its requests. syscalls/req: system calls the proxy's"
    echo "  processes and threads entered during the run (perf, raw_syscalls:sys_enter), over its"
    echo "  requests. instr/req: user-space instructions (perf, instructions:u) where the CPU's counters"
    echo "  can be read (\"–\" here otherwise: bench/instructions.sh counts them under valgrind)."
    echo
    columns="| case | workers | conns | proxy | req/s | p50 µs | p99 µs | CPU s | cpu µs/req | user µs/req | sys µs/req | syscalls/req | instr/req | peak RSS MiB | ×nginx req/s | ×HAProxy req/s |"
    if [ -n "$BASELINE" ]; then
        echo "$columns ×baseline req/s |"
        echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    else
        echo "$columns"
        echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    fi
    awk -F'\t' -v baseline="${BASELINE:+1}" '
        function median(key,    n, i, j, t, a) {
            n = split(vals[key], a, " ")
            for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
            return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
        }
        {
            row = $1 SUBSEP $2 SUBSEP $3 SUBSEP $4
            if (!(row in seen)) { seen[row] = 1; order[++rows] = row }
            for (f = 6; f <= 11; f++) vals[row, f] = vals[row, f] " " $f
            if ($10 + 0 > peak[row]) peak[row] = $10 + 0
            # Per request, run by run: user and system µs, system calls, instructions.
            if ($11 + 0 > 0) {
                if ($12 != "") vals[row, 12] = vals[row, 12] " " $12 * 1e6 / $11
                if ($13 != "") vals[row, 13] = vals[row, 13] " " $13 * 1e6 / $11
                if ($14 ~ /^[0-9]+$/) vals[row, 14] = vals[row, 14] " " $14 / $11
                if ($15 ~ /^[0-9]+$/) vals[row, 15] = vals[row, 15] " " $15 / $11
            }
        }
        END {
            for (r = 1; r <= rows; r++) {
                row = order[r]
                for (f = 6; f <= 11; f++) med[row, f] = median(row SUBSEP f)
                for (f = 12; f <= 15; f++) med[row, f] = vals[row, f] == "" ? "" : median(row SUBSEP f)
            }
            for (r = 1; r <= rows; r++) {
                row = order[r]; split(row, k, SUBSEP)
                base = k[1] SUBSEP k[2] SUBSEP k[3]
                xn = xh = xb = ""
                # The baseline gets ratios to the peers too: beside those of fulcrum, in the same
                # run, they show how far the change moved fulcrum against nginx and HAProxy.
                if (k[4] == "fulcrum" || k[4] == "baseline") {
                    if ((base SUBSEP "nginx") in seen) xn = sprintf("%.2f×", med[row, 6] / med[base SUBSEP "nginx", 6])
                    if ((base SUBSEP "haproxy") in seen) xh = sprintf("%.2f×", med[row, 6] / med[base SUBSEP "haproxy", 6])
                }
                if (k[4] == "fulcrum" && baseline) xb = sprintf("%.2f×", med[row, 6] / med[base SUBSEP "baseline", 6])
                cpu = med[row, 9]; per = med[row, 11] > 0 && k[4] != "direct" ? sprintf("%.2f", cpu * 1e6 / med[row, 11]) : "–"
                direct = k[4] == "direct"
                user = direct || med[row, 12] == "" ? "–" : sprintf("%.2f", med[row, 12])
                sys = direct || med[row, 13] == "" ? "–" : sprintf("%.2f", med[row, 13])
                calls = direct || med[row, 14] == "" ? "–" : sprintf("%.2f", med[row, 14])
                ins = direct || med[row, 15] == "" ? "–" : sprintf("%.0f", med[row, 15])
                printf "| %s | %s | %s | %s | %.0f | %.0f | %.0f | %s | %s | %s | %s | %s | %s | %s | %s | %s |%s\n",
                    k[1], k[2], k[3], k[4], med[row, 6], med[row, 7], med[row, 8],
                    direct ? "–" : sprintf("%.2f", cpu), per, user, sys, calls, ins,
                    direct ? "–" : sprintf("%.1f", peak[row] / 1024), xn, xh,
                    baseline ? " " xb " |" : ""
            }
        }' "$RAW"
    echo
    # Paired ratios: fulcrum over each peer within each repetition (the two ran seconds apart,
    # under the same weather), their median and range: steadier than a ratio of medians.
    awk -F'\t' '
        function median(s,    n, i, j, t, a) {
            n = split(s, a, " ")
            for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
            return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
        }
        { rate[$1 SUBSEP $2 SUBSEP $3 SUBSEP $5, $4] = $6; if (!(($1 SUBSEP $2 SUBSEP $3) in seen)) { seen[$1 SUBSEP $2 SUBSEP $3] = 1; order[++n] = $1 SUBSEP $2 SUBSEP $3 } if ($5 > reps) reps = $5 }
        END {
            for (i = 1; i <= n; i++) {
                split(order[i], k, SUBSEP)
                line = ""
                for (p = 1; p <= 3; p++) {
                    peer = p == 1 ? "nginx" : p == 2 ? "haproxy" : "baseline"
                    list = ""; lo = ""; hi = ""
                    for (r = 1; r <= reps; r++) {
                        key = order[i] SUBSEP r
                        if (!((key, "fulcrum") in rate) || !((key, peer) in rate) || rate[key, peer] <= 0) continue
                        x = rate[key, "fulcrum"] / rate[key, peer]
                        list = list " " x
                        if (lo == "" || x < lo) lo = x
                        if (hi == "" || x > hi) hi = x
                    }
                    if (list != "") line = line sprintf("; fulcrum/%s %.3f (%.2f–%.2f)", peer, median(list), lo, hi)
                }
                if (line != "") printf "* paired, %s at %s worker(s), %s connections: per repetition%s\n", k[1], k[2], k[3], line
            }
        }' "$RAW"
    echo
    echo "Finished in $(( $(date +%s) - STARTED )) s. Raw runs (case, workers, conns, proxy, rep, req/s, p50 µs, p99 µs, CPU s, peak RSS KiB, requests, user s, system s, system calls, instructions):"
    echo
    echo '```'
    cat "$RAW"
    echo '```'
} >"$OUT"
echo >&2
sed -n '/^| case/,/^$/p' "$OUT"
echo "written to $OUT" >&2
