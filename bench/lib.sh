# shellcheck shell=bash
# What the bench scripts share; sourced, not run.

# Installs from Debian's packages whichever of the named programs is missing (with sudo when
# not root).
need() {
    local missing=() cmd
    for cmd in "$@"; do
        command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] || missing+=("$cmd")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        local sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        echo "installing from Debian's packages: ${missing[*]}" >&2
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
    fi
}

# need_file PATH PACKAGE: installs PACKAGE from Debian's packages when PATH is missing (a
# module or library rather than a command).
need_file() {
    if [ ! -e "$1" ]; then
        local sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        echo "installing from Debian's packages: $2" >&2
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$2"
    fi
}

# resolve_executable NAME: the variable NAME (a fulcrum build given by path), if set, made an
# absolute path; exits with an error if it is not an executable file.
resolve_executable() {
    local name=$1 path=${!1:-}
    if [ -n "$path" ]; then
        if [ ! -x "$path" ] || [ -d "$path" ]; then
            echo "error: $name=$path is not an executable file" >&2
            exit 1
        fi
        printf -v "$name" '%s' "$(realpath "$path")"
    fi
}

# resolve_baseline: BASELINE (another fulcrum build to measure beside this checkout's), if set,
# as an absolute path; exits with an error if it is not an executable file.
resolve_baseline() {
    BASELINE=${BASELINE:-}
    resolve_executable BASELINE
}

# wait_port PORT [SECONDS]: returns when something accepts on 127.0.0.1:PORT; exits the script
# with an error after SECONDS (default 5).
wait_port() {
    local port=$1 seconds=${2:-5}
    for _ in $(seq 1 $((seconds * 20))); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
        sleep 0.05
    done
    echo "error: nothing listens on 127.0.0.1:$port after $seconds s" >&2
    exit 1
}

# work_dir PREFIX: makes WORK, a fresh directory under /tmp, and PIDS, where the script adds
# the PID of each process it starts. On exit (or Ctrl-C) each of those is stopped, by PID, and
# waited for, and WORK is removed.
work_dir() {
    WORK=$(mktemp -d "/tmp/$1.XXXXXX")
    # The proxies' access logs (the logs case) on tmpfs where there is one: on this VM the
    # disk's interrupts are delivered to CPU 1, where the proxies are pinned, and with the
    # logs on disk each proxy's CPU per request in the logs case moved by up to 4 µs from rep
    # to rep (fulcrum's 13.6-17.9 µs, nginx's 14.1-18.0): the writeback of every proxy's
    # files can land in whichever is being measured. On tmpfs each proxy pays for its own
    # lines only: formatting them and copying them into the file.
    LOG_DIR=$(mktemp -d "/dev/shm/$1-logs.XXXXXX" 2>/dev/null || echo "$WORK")
    PIDS=()
    trap clean_up EXIT
    trap 'exit 130' INT TERM
}

clean_up() {
    local pid
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$WORK" "$LOG_DIR"
}
