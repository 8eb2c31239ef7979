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
