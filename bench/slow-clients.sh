#!/usr/bin/env bash
# Slow clients (issue 16): fulcrum and nginx, one worker each, under 1,000 slowloris connections
# and then 1,000 slow-body connections from slowhttptest, in the same run.
#
#   bench/slow-clients.sh                                  # about 10 minutes on 2 cores
#   FULCRUM=/tmp/fulcrum-bin/fulcrum bench/slow-clients.sh # a prebuilt binary (nothing is built)
#   ROUNDS=3 WRK_SECONDS=5 bench/slow-clients.sh           # a quicker look
#
# Two questions:
#   1. Do normal clients suffer more behind fulcrum than behind nginx while 1,000 slow
#      connections are held open? A 16-connection wrk client's p50/p99, without an attack and
#      with each attack, for each proxy.
#   2. Is every slow connection closed at the configured timeout? The attack's connections to the
#      proxy are counted with `ss` (server side, ESTABLISHED) from the attack's start until none
#      is left: when they were all open, when the first and the last were closed, and the time
#      from half open to half closed (about the median connection's lifetime), against the
#      header timeout (slowloris) or the body timeout (slow body). slowhttptest's own per-second
#      report (-g) and exit status are kept beside it.
#
# What it does:
#   * installs slowhttptest, wrk and nginx from Debian's packages if they are missing;
#   * starts one nginx as the backend (one port on 127.0.0.1, a small 200), and as proxies
#     nginx (worker_processes 1) and fulcrum (workers = 1), configured alike: the same header and
#     body timeouts (TIMEOUT; nginx client_header_timeout/client_body_timeout, fulcrum
#     client_header_timeout/client_body_timeout; the keep-alive idle time too, which fulcrum ties
#     to the header timeout), keep-alive to the backend, access logs off, room for MAXCONN
#     connections (nginx worker_connections and worker_rlimit_nofile, fulcrum max_connections);
#   * ROUNDS rounds, alternating nginx, fulcrum, nginx, fulcrum, ...; in each, for the proxy:
#     - baseline: wrk (WRK_CONNS connections, 1 thread, WRK_SECONDS, --latency), no attack;
#     - slowloris: slowhttptest -H with SLOW_CONNS connections; once they are all open, the same
#       wrk; then the attack's connections are counted until none is left;
#     - slow body: the same with slowhttptest -B;
#   * writes bench/results/slow-clients-<date>.md: medians over the rounds, every round, the
#     closing times, and the command line.
#
# The timeout must outlast the attack's ramp plus the wrk run (checked), so that the attack is
# whole for the entire measurement and the closing happens after it. An attack whose connections
# are still open GRACE seconds after the timeout is stopped (slowhttptest gets SIGTERM and closes
# them), so every step is bounded in time.
#
# Pinning (2 cores or more): both proxies on CPU 1, wrk, slowhttptest and the backend on CPU 0,
# as compare.sh does for 1 worker. PIN=0 pins nothing.
#
# Only loopback. Every process it starts is stopped on exit, by PID.
set -euo pipefail
export LC_ALL=C

FULCRUM=${FULCRUM:-target/release/fulcrum}
# Resolved before the cd below, so a path relative to where it was run from still works.
if [ ! -x "$FULCRUM" ] || [ -d "$FULCRUM" ]; then
    if [ ! -x "$(dirname "$0")/../$FULCRUM" ]; then
        echo "error: FULCRUM=$FULCRUM is not an executable file (build it, or point FULCRUM at one)" >&2
        exit 1
    fi
    FULCRUM="$(dirname "$0")/../$FULCRUM"
fi
FULCRUM=$(realpath "$FULCRUM")
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-5}             # rounds; each measures both proxies (medians over them)
TIMEOUT=${TIMEOUT:-20}          # seconds: header and body timeout of both proxies
WRK_SECONDS=${WRK_SECONDS:-10}  # seconds per wrk run
WRK_CONNS=${WRK_CONNS:-16}      # the normal clients
SLOW_CONNS=${SLOW_CONNS:-1000}  # the attack's connections
SLOW_RATE=${SLOW_RATE:-1000}    # slowhttptest -r: connections opened per second
SLOW_INTERVAL=${SLOW_INTERVAL:-2} # slowhttptest -i: seconds between two trickles on a connection
GRACE=${GRACE:-10}              # seconds past the timeout before an attack still open is stopped
MAXCONN=${MAXCONN:-8192}        # connections each proxy may hold
PIN=${PIN:-1}
QUIET_WAIT=${QUIET_WAIT:-60}    # seconds at most to wait, before each step, for others to go quiet

PORT_BACKEND=19401
PORT_NGINX=19402
PORT_FULCRUM=19403

if [ "$TIMEOUT" -le $((WRK_SECONDS + 5)) ]; then
    echo "error: TIMEOUT=$TIMEOUT must exceed WRK_SECONDS=$WRK_SECONDS by more than 5 s (the attack's ramp): the attack must be whole while wrk runs" >&2
    exit 1
fi
if [ "$SLOW_INTERVAL" -ge "$TIMEOUT" ]; then
    echo "error: SLOW_INTERVAL=$SLOW_INTERVAL must be below TIMEOUT=$TIMEOUT, or a per-read timeout closes the attack too" >&2
    exit 1
fi

# shellcheck source=bench/lib.sh
source bench/lib.sh  # the working directory is the repository root (see the cd above)
need slowhttptest wrk nginx
export PATH="$PATH:/usr/sbin"

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
NOFILE=$(ulimit -n)
if [ "$NOFILE" != unlimited ] && [ "$NOFILE" -lt $((MAXCONN + 2048)) ]; then
    echo "error: the open-files limit is $NOFILE; MAXCONN=$MAXCONN needs at least $((MAXCONN + 2048)) (raise the hard limit, or lower MAXCONN)" >&2
    exit 1
fi

for port in $PORT_BACKEND $PORT_NGINX $PORT_FULCRUM; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        echo "error: 127.0.0.1:$port is in use; stop what listens there and run again" >&2
        exit 1
    fi
done

work_dir fulcrum-slow

# A copy, so that a rebuild during the run does not swap the binary between rounds.
cp "$FULCRUM" "$WORK/fulcrum"
FULCRUM_SHA=$(sha256sum "$FULCRUM" | cut -c1-12)

CORES=$(nproc)
CLK_TCK=$(getconf CLK_TCK)
BACKEND_PID="" SLOW_PID=""
PROXY_CPUS="" CLIENT_CPUS=""
if [ "$PIN" = 1 ] && [ "$CORES" -ge 2 ]; then PROXY_CPUS=1 CLIENT_CPUS=0; fi
pin() {
    if [ -n "$1" ]; then echo "taskset -c $1"; fi
}


nginx_temp_paths() {
    local dir=$1
    echo "  client_body_temp_path $dir; proxy_temp_path $dir; fastcgi_temp_path $dir;"
    echo "  uwsgi_temp_path $dir; scgi_temp_path $dir;"
}

start_backend() {
    local dir=$WORK/backend
    mkdir -p "$dir/logs"
    {
        echo "worker_processes 1; pid $dir/nginx.pid; error_log $dir/logs/error.log warn;"
        echo "worker_rlimit_nofile $NOFILE;"
        echo "events { worker_connections $MAXCONN; }"
        echo "http { access_log off; keepalive_requests 1000000; keepalive_timeout 60s;"
        nginx_temp_paths "$dir"
        # The \n is for nginx (the body's newline), not for echo.
        # shellcheck disable=SC2028
        echo "  server { listen 127.0.0.1:$PORT_BACKEND; location / { return 200 \"backend\\n\"; } }"
        echo "}"
    } >"$dir/nginx.conf"
    $(pin "$CLIENT_CPUS") nginx -c "$dir/nginx.conf" -p "$dir" -g 'daemon off;' &
    BACKEND_PID=$!
    PIDS+=("$!")
    wait_port $PORT_BACKEND
}

declare -A PROXY_PID PROXY_PORT=([nginx]=$PORT_NGINX [fulcrum]=$PORT_FULCRUM)

start_nginx() {
    local dir=$WORK/nginx
    mkdir -p "$dir/logs"
    {
        echo "worker_processes 1; pid $dir/nginx.pid; error_log $dir/logs/error.log warn;"
        echo "worker_rlimit_nofile $NOFILE;"
        echo "events { worker_connections $MAXCONN; }"
        echo "http { access_log off; keepalive_requests 1000000;"
        # The same limits as fulcrum's listener below: fulcrum's client_header_timeout is also
        # its keep-alive idle time, so nginx's keepalive_timeout follows it.
        echo "  client_header_timeout ${TIMEOUT}s; client_body_timeout ${TIMEOUT}s; keepalive_timeout ${TIMEOUT}s;"
        nginx_temp_paths "$dir"
        echo "  upstream b { server 127.0.0.1:$PORT_BACKEND; keepalive 1024; keepalive_requests 1000000; }"
        echo "  server { listen 127.0.0.1:$PORT_NGINX; location / {"
        echo "    proxy_pass http://b; proxy_http_version 1.1; proxy_set_header Connection \"\";"
        echo "    proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for; } }"
        echo "}"
    } >"$dir/nginx.conf"
    $(pin "$PROXY_CPUS") nginx -c "$dir/nginx.conf" -p "$dir" -g 'daemon off;' &
    PROXY_PID[nginx]=$!
    PIDS+=("$!")
    wait_port $PORT_NGINX
}

start_fulcrum() {
    local conf=$WORK/fulcrum.toml
    {
        echo "workers = 1"
        echo "access_log = false"
        echo "[[listener]]"
        echo "listen = \"127.0.0.1:$PORT_FULCRUM\""
        echo "upstream = \"b\""
        echo "max_connections = $MAXCONN"
        echo "client_header_timeout = \"${TIMEOUT}s\""
        echo "client_body_timeout = \"${TIMEOUT}s\""
        echo "[[upstream]]"
        echo "name = \"b\""
        echo "keepalive = 1024"
        echo "[[upstream.backend]]"
        echo "addr = \"127.0.0.1:$PORT_BACKEND\""
    } >"$conf"
    RUST_LOG=warn $(pin "$PROXY_CPUS") "$WORK/fulcrum" run --config "$conf" 2>"$WORK/fulcrum.log" &
    PROXY_PID[fulcrum]=$!
    PIDS+=("$!")
    wait_port $PORT_FULCRUM
}

# The PIDs of a process and its children (nginx's master and worker).
family() {
    echo "$1"
    pgrep -P "$1" 2>/dev/null || true
}

# Open descriptors and resident memory (KiB) of a proxy, over its processes: "fds rss".
proxy_usage() {
    local fds=0 rss=0 pid n kib
    for pid in $(family "$1"); do
        n=$(find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
        kib=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status" 2>/dev/null || echo 0)
        fds=$((fds + n)) rss=$((rss + ${kib:-0}))
    done
    echo "$fds $rss"
}

# CPU time (user + system) of a process and its children, in clock ticks.
cpu_ticks() {
    local total=0 pid rest fields
    for pid in $(family "$1"); do
        # Fields after the command name, which is in parentheses: utime is the 12th, stime the 13th.
        rest=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null) || continue
        read -ra fields <<<"$rest"
        total=$((total + fields[11] + fields[12]))
    done
    echo "$total"
}

# What this run itself used, in clock ticks: this shell with every child it has reaped (wrk,
# ss, ...), the backend, both proxies and the attack under way.
our_ticks() {
    local rest fields total pid
    rest=$(sed 's/^.*) //' "/proc/$$/stat")
    read -ra fields <<<"$rest"
    # utime, stime, cutime, cstime.
    total=$((fields[11] + fields[12] + fields[13] + fields[14]))
    for pid in "$BACKEND_PID" "${PROXY_PID[nginx]}" "${PROXY_PID[fulcrum]}" ${SLOW_PID:-}; do
        total=$((total + $(cpu_ticks "$pid")))
    done
    echo "$total"
}

# The machine's busy and stolen time over all CPUs, in clock ticks: "busy steal".
machine_ticks() {
    awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $9 }' /proc/stat
}

# The CPU time others took on this shared machine (other users' builds, ...) over a window:
# the machine's busy time less ours, and the time the hypervisor stole, in seconds.
# others_since "MACHINE_TICKS" OUR_TICKS -> "others_s steal_s"
others_since() {
    local machine ours
    machine=$(machine_ticks) ours=$(our_ticks)
    awk -v m0="$1" -v m1="$machine" -v o0="$2" -v o1="$ours" -v hz="$CLK_TCK" 'BEGIN {
        split(m0, a, " "); split(m1, b, " ")
        others = (b[1] - a[1]) - (o1 - o0); if (others < 0) others = 0
        printf "%.2f %.2f", others / hz, (b[2] - a[2]) / hz
    }'
}

# Waits (at most QUIET_WAIT seconds) until others used under a quarter of a core over a second,
# so a measurement does not start in the middle of someone else's build.
wait_quiet() {
    local waited=0 m o use
    while [ "$waited" -lt "$QUIET_WAIT" ]; do
        m=$(machine_ticks) o=$(our_ticks)
        sleep 1
        use=$(others_since "$m" "$o")
        if awk -v u="${use% *}" 'BEGIN { exit !(u < 0.25) }'; then return 0; fi
        waited=$((waited + 1))
    done
    echo "  note: others still busy after ${QUIET_WAIT} s of waiting; measuring anyway" >&2
}

# Client connections the proxy holds open (its accepted sockets still ESTABLISHED). A socket
# the proxy closed leaves this state at once (FIN-WAIT), whatever the client does after.
held() {
    ss -Htn state established "( sport = :$1 )" | wc -l
}

# Latency as wrk prints it (e.g. 812.00us, 1.20ms, 2.01s) in microseconds.
to_us() {
    awk -v v="$1" 'BEGIN {
        n = v + 0
        if (v ~ /us$/) print n; else if (v ~ /ms$/) print n * 1000; else if (v ~ /s$/) print n * 1000000; else print n
    }'
}

RAW=$WORK/wrk.tsv      # round proxy scenario req/s p50_us p99_us requests errors others_cpu_s steal_s
CLOSING=$WORK/closing.tsv
# round proxy attack all_open_s held_after_wrk first_close_s half_closed_s all_closed_s
# lifetime_s sample_gap_s stopped fds_before fds_during fds_after rss_during_kib slowhttptest_exit
WRK_ARGS=(-t1 "-c$WRK_CONNS" "-d${WRK_SECONDS}s" --latency)

# run_wrk ROUND PROXY SCENARIO
run_wrk() {
    local round=$1 name=$2 scenario=$3 out rps p50 p99 requests errors m0 o0 others
    m0=$(machine_ticks) o0=$(our_ticks)
    out=$($(pin "$CLIENT_CPUS") wrk "${WRK_ARGS[@]}" "http://127.0.0.1:${PROXY_PORT[$name]}/")
    others=$(others_since "$m0" "$o0")
    rps=$(awk '/^Requests\/sec:/ { print $2 }' <<<"$out")
    p50=$(to_us "$(awk '$1 == "50%" { print $2 }' <<<"$out")")
    p99=$(to_us "$(awk '$1 == "99%" { print $2 }' <<<"$out")")
    requests=$(awk '/requests in/ { print $1 }' <<<"$out")
    errors=$(awk '/Non-2xx|Socket errors/ { sub(/^ +/, ""); printf "%s%s", sep, $0; sep = "; " }' <<<"$out")
    [ -n "$errors" ] || errors=none
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$name" "$scenario" "$rps" "$p50" "$p99" \
        "$requests" "$errors" "${others% *}" "${others#* }" >>"$RAW"
    printf '  round %s %-7s %-9s %9.0f req/s  p50 %6.0f us  p99 %6.0f us  errors: %s  others: %s CPU s, steal %s s\n' \
        "$round" "$name" "$scenario" "$rps" "$p50" "$p99" "$errors" "${others% *}" "${others#* }" >&2
}

# now: seconds since START, to the millisecond.
now() {
    awk -v t="$EPOCHREALTIME" -v s="$ATTACK_START" 'BEGIN { printf "%.3f", t - s }'
}

# attack ROUND PROXY MODE(-H|-B) NAME
attack() {
    local round=$1 name=$2 mode=$3 attack=$4
    local port=${PROXY_PORT[$name]} pid=${PROXY_PID[$name]}
    local samples=$WORK/samples-$round-$name-$attack.tsv prefix=$WORK/slowhttptest-$round-$name-$attack
    local length=$((TIMEOUT + GRACE + 5)) n t deadline usage_before usage_during usage_after
    local held_after_wrk stopped=no slow_pid exit_status wrk_end
    : >"$samples"
    usage_before=$(proxy_usage "$pid")
    ATTACK_START=$EPOCHREALTIME
    # -l outlasts the timeout and the grace, so slowhttptest ends by itself even if nothing
    # closes its connections; it also ends as soon as none of them is left open.
    $(pin "$CLIENT_CPUS") slowhttptest "$mode" -c "$SLOW_CONNS" -r "$SLOW_RATE" -i "$SLOW_INTERVAL" \
        -l "$length" -u "http://127.0.0.1:$port/" -g -o "$prefix" >"$prefix.log" 2>&1 &
    slow_pid=$!
    SLOW_PID=$slow_pid
    PIDS+=("$slow_pid")
    # The ramp: until every attack connection is open (at most 15 s).
    while :; do
        n=$(held "$port") t=$(now)
        printf '%s\t%s\n' "$t" "$n" >>"$samples"
        if [ "$n" -ge "$SLOW_CONNS" ] || awk -v t="$t" 'BEGIN { exit !(t >= 15) }'; then break; fi
        sleep 0.05
    done
    if [ "$n" -lt "$SLOW_CONNS" ]; then
        echo "  warning: $name $attack: only $n of $SLOW_CONNS attack connections open after 15 s" >&2
    fi
    usage_during=$(proxy_usage "$pid")
    # No sampling while wrk runs: it would take CPU from wrk, and wrk's own connections count.
    run_wrk "$round" "$name" "$attack"
    wrk_end=$(now)
    held_after_wrk=$(held "$port")
    # The closing: until none is left, or the grace past the timeout is over.
    deadline=$((TIMEOUT + GRACE))
    while :; do
        n=$(held "$port") t=$(now)
        printf '%s\t%s\n' "$t" "$n" >>"$samples"
        if [ "$n" -eq 0 ] || awk -v t="$t" -v d="$deadline" 'BEGIN { exit !(t >= d) }'; then break; fi
        sleep 0.1
    done
    if [ "$n" -gt 0 ]; then
        # Not closed by the proxy: stop the attack (slowhttptest closes its sockets on SIGTERM),
        # so that the next step starts clean.
        stopped="yes ($n open at $t s)"
        kill "$slow_pid" 2>/dev/null || true
        for _ in $(seq 1 100); do
            [ "$(held "$port")" -gt 0 ] || break
            sleep 0.1
        done
    fi
    wait "$slow_pid" 2>/dev/null || true
    SLOW_PID=""
    sleep 1
    usage_after=$(proxy_usage "$pid")
    # "Exit status: No open connections left" or "Hit test time limit", without the colours.
    exit_status=$(sed 's/\x1b\[[0-9;]*m//g' "$prefix.log" | awk -F': *' '/^Exit status/ { print $2 }' | tail -1)
    [ -n "$exit_status" ] || exit_status="(none: stopped)"
    # From the samples: when all were open, when the first and the last were closed, and the
    # time from half open to half closed (about the lifetime of the median connection).
    awk -F'\t' -v total="$SLOW_CONNS" -v after="$held_after_wrk" -v wrk_end="$wrk_end" '
        { t[NR] = $1; n[NR] = $2; if ($2 > peak) { peak = $2; peak_at = NR } }
        END {
            half = total / 2; all_open = "–"; open50 = ""; first = "–"; close50 = ""; closed = "–"
            for (i = 1; i <= NR; i++) {
                if (all_open == "–" && n[i] >= total) all_open = t[i]
                if (open50 == "" && n[i] >= half) open50 = t[i]
            }
            # The peak may count the probe connection of slowhttptest beside the attack: the
            # first close is the first sample below the attack alone.
            full = peak < total ? peak : total
            for (i = peak_at + 1; i <= NR; i++) {
                if (first == "–" && n[i] < full) first = t[i]
                if (close50 == "" && n[i] <= half) close50 = t[i]
                if (closed == "–" && n[i] == 0) closed = t[i]
            }
            # Closed while wrk ran (no samples then): the first close is somewhere in that window.
            if (after < full) first = "during wrk"
            life = (open50 != "" && close50 != "") ? sprintf("%.2f", close50 - open50) : "–"
            # The longest time between two samples after wrk: the resolution of the closing times
            # (a loaded machine can hold the sampler back).
            gap = 0
            for (i = NR - 1; i >= 1 && t[i] >= wrk_end; i--) if (t[i + 1] - t[i] > gap) gap = t[i + 1] - t[i]
            printf "%s\t%s\t%s\t%s\t%s\t%s\t%.2f", all_open, after, first, close50 == "" ? "–" : close50, closed, life, gap
        }' "$samples" >"$samples.summary"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$name" "$attack" "$(cat "$samples.summary")" \
        "$stopped" "${usage_before% *}" "${usage_during% *}" "${usage_after% *}" "${usage_during#* }" "$exit_status" >>"$CLOSING"
    local all_open after first half closed life gap
    IFS=$'\t' read -r all_open after first half closed life gap <"$samples.summary" || true
    printf '  round %s %-7s %-9s (s from attack start) all open %s, held after wrk %s, first closed %s, half closed %s, all closed %s, lifetime %s (samples <= %s s apart); stopped: %s; fds %s/%s/%s; slowhttptest: %s\n' \
        "$round" "$name" "$attack" "$all_open" "$after" "$first" "$half" "$closed" "$life" "$gap" "$stopped" \
        "${usage_before% *}" "${usage_during% *}" "${usage_after% *}" "$exit_status" >&2
}

STARTED=$(date +%s)
echo "fulcrum $FULCRUM (sha256 $FULCRUM_SHA); timeouts ${TIMEOUT}s; $ROUNDS rounds" >&2
start_backend
start_nginx
start_fulcrum
for name in nginx fulcrum; do
    # Warm-up: connections to the backend opened, caches and allocators warm.
    $(pin "$CLIENT_CPUS") wrk -t1 -c"$WRK_CONNS" -d2s "http://127.0.0.1:${PROXY_PORT[$name]}/" >/dev/null
done
for round in $(seq 1 "$ROUNDS"); do
    for name in nginx fulcrum; do
        wait_quiet
        run_wrk "$round" "$name" baseline
        sleep 1
        wait_quiet
        attack "$round" "$name" -H slowloris
        sleep 1
        wait_quiet
        attack "$round" "$name" -B slow-body
        sleep 1
    done
done
for name in nginx fulcrum; do
    if ! kill -0 "${PROXY_PID[$name]}" 2>/dev/null; then
        echo "warning: $name is no longer running" >&2
    fi
done

RESULTS=bench/results
mkdir -p "$RESULTS"
OUT="$RESULTS/slow-clients-$(date +%Y-%m-%d).md"
COMMAND="FULCRUM=$FULCRUM ROUNDS=$ROUNDS TIMEOUT=$TIMEOUT WRK_SECONDS=$WRK_SECONDS WRK_CONNS=$WRK_CONNS SLOW_CONNS=$SLOW_CONNS SLOW_RATE=$SLOW_RATE SLOW_INTERVAL=$SLOW_INTERVAL GRACE=$GRACE MAXCONN=$MAXCONN PIN=$PIN QUIET_WAIT=$QUIET_WAIT bench/slow-clients.sh"
{
    echo "# Slow clients: fulcrum vs nginx, 1 worker — $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "* machine: $(hostname -s), $CORES cores ($(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)), shared and noisy (other jobs run beside), $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), kernel $(uname -r)"
    echo "* tools: $(nginx -v 2>&1 | sed 's/^nginx version: //'), $("$WORK/fulcrum" --version) ($FULCRUM, sha256 $FULCRUM_SHA), $(wrk -v 2>&1 | head -1 | awk '{ print $1, $2 }'), slowhttptest $(slowhttptest -h 2>&1 | awk '/version/ { print $NF; exit }')"
    echo "* command: \`$COMMAND\`"
    echo "* both proxies: 1 worker, header and body timeout ${TIMEOUT} s, keep-alive to one nginx backend, access log off, room for $MAXCONN connections, open-files limit $NOFILE.$([ -n "$PROXY_CPUS" ] && echo " Proxies pinned to CPU $PROXY_CPUS; wrk, slowhttptest and the backend to CPU $CLIENT_CPUS.")"
    echo "* normal clients: \`wrk ${WRK_ARGS[*]}\`. Attacks: \`slowhttptest -H|-B -c $SLOW_CONNS -r $SLOW_RATE -i $SLOW_INTERVAL -l $((TIMEOUT + GRACE + 5)) -g\`; wrk starts once all $SLOW_CONNS are open."
    echo "* $ROUNDS rounds, alternating nginx and fulcrum; in each, for each proxy: baseline, slowloris, slow body. Medians over the rounds."
    echo
    echo "## Normal clients' latency (medians over $ROUNDS rounds)"
    echo
    echo "| scenario | nginx p50 µs | fulcrum p50 µs | nginx p99 µs | fulcrum p99 µs | p99 fulcrum/nginx | nginx p99 ×baseline | fulcrum p99 ×baseline | nginx req/s | fulcrum req/s | others' CPU s, nginx / fulcrum |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|"
    awk -F'\t' '
        function median(s,    n, i, j, t, a) {
            n = split(s, a, " ")
            for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
            return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
        }
        { rps[$2, $3] = rps[$2, $3] " " $4; p50[$2, $3] = p50[$2, $3] " " $5; p99[$2, $3] = p99[$2, $3] " " $6
          oth[$2, $3] = oth[$2, $3] " " $9 }
        END {
            split("baseline slowloris slow-body", sc, " ")
            for (i = 1; i <= 3; i++) {
                s = sc[i]
                n99 = median(p99["nginx", s]); f99 = median(p99["fulcrum", s])
                nb = median(p99["nginx", "baseline"]); fb = median(p99["fulcrum", "baseline"])
                printf "| %s | %.0f | %.0f | %.0f | %.0f | %.2f | %.2f | %.2f | %.0f | %.0f | %.2f / %.2f |\n", s,
                    median(p50["nginx", s]), median(p50["fulcrum", s]), n99, f99, f99 / n99,
                    n99 / nb, f99 / fb, median(rps["nginx", s]), median(rps["fulcrum", s]),
                    median(oth["nginx", s]), median(oth["fulcrum", s])
            }
        }' "$RAW"
    echo
    echo "Every round (the order they ran in):"
    echo
    echo "| round | proxy | scenario | req/s | p50 µs | p99 µs | requests | wrk errors | others' CPU s | steal s |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
    awk -F'\t' '{ printf "| %s | %s | %s | %.0f | %.0f | %.0f | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10 }' "$RAW"
    echo
    echo "*others' CPU*: CPU time the rest of the machine (not this run's processes) used during that wrk"
    echo "run, out of $((CORES * WRK_SECONDS)) s ($CORES cores × ${WRK_SECONDS} s); *steal*: time the hypervisor took. Each step first waited"
    echo "(at most ${QUIET_WAIT} s) for others to use under a quarter of a core; a build can still start mid-run."
    echo
    echo "## Closing the slow connections (timeout ${TIMEOUT} s)"
    echo
    echo "Seconds from the attack's start, from \`ss\` (the proxy's accepted sockets still ESTABLISHED),"
    echo "sampled every 0.05–0.1 s except while wrk ran (*longest sample gap*: the coarsest step after wrk). *lifetime*: from half of the attack open to half"
    echo "closed, about the median connection's time open. *stopped*: still open ${GRACE} s past the timeout,"
    echo "so the script stopped slowhttptest. fds: the proxy's open descriptors before the attack, with it"
    echo "open, and 1 s after it ended."
    echo
    echo "| round | proxy | attack | all open | held after wrk | first closed | half closed | all closed | lifetime | longest sample gap | stopped | fds before / during / after | RSS during MiB | slowhttptest exit |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    awk -F'\t' '{ printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s / %s / %s | %.1f | %s |\n",
        $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15 / 1024, $16 }' "$CLOSING"
    echo
    echo "Medians of the lifetime (s) over the rounds where it was measured:"
    echo
    awk -F'\t' '
        function median(s,    n, i, j, t, a) {
            n = split(s, a, " ")
            for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
            return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
        }
        { key = $2 " " $3; if (!(key in seen)) { seen[key] = 1; order[++k] = key }
          if ($9 != "–") life[key] = life[key] " " $9; if ($8 != "–") closed[key] = closed[key] " " $8 }
        END { for (i = 1; i <= k; i++) { key = order[i]
            if (life[key] == "") printf "* %s: not closed by the proxy in any round (timeout '"$TIMEOUT"' s)\n", key
            else printf "* %s: lifetime %s s, all closed at %s s (timeout '"$TIMEOUT"' s)\n", key, median(life[key]),
                closed[key] == "" ? "– (never)" : median(closed[key]) } }' "$CLOSING"
    echo
    echo "Logs: fulcrum's stderr had $(wc -l <"$WORK/fulcrum.log") lines$( [ -s "$WORK/fulcrum.log" ] && echo " (first: \`$(head -1 "$WORK/fulcrum.log" | cut -c1-200)\`)"); nginx's error log (level warn) $(wc -l <"$WORK/nginx/logs/error.log") lines."
    echo
    echo "Finished in $(($(date +%s) - STARTED)) s. Raw wrk runs (round, proxy, scenario, req/s, p50 µs, p99 µs, requests, errors, others' CPU s, steal s):"
    echo
    echo '```'
    cat "$RAW"
    echo '```'
} >"$OUT"
# slowhttptest's per-second reports (seconds, closed, pending, connected), for the first round.
for f in "$WORK"/slowhttptest-1-*.csv; do
    [ -e "$f" ] || continue
    {
        echo
        echo "slowhttptest's report, $(basename "$f" .csv | sed 's/^slowhttptest-//') (seconds, closed, pending, connected, service available):"
        echo
        echo '```'
        cat "$f"
        echo '```'
    } >>"$OUT"
done
echo >&2
sed -n '/^## Normal/,/^Every round/p' "$OUT" >&2
sed -n '/^Medians of the lifetime/,/^Logs/p' "$OUT" >&2
echo "written to $OUT" >&2
