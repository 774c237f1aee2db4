#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for tests and local trials.
#
#   scripts/postgres.sh start [--watch PID]   prints the cluster's URL on stdout
#   scripts/postgres.sh stop DIR|URL          stops the cluster and removes its folder
#   scripts/postgres.sh restart DIR|URL       restarts it (fast shutdown), same port and data
#
# `start` installs PostgreSQL from the distribution's packages when its binaries are missing
# (as root: `apt-get update`, then `apt-get install -y postgresql`), initialises a cluster in a
# new temporary folder, and starts it on a free loopback port with trust authentication for the
# user `loom`, as an unprivileged system user: PostgreSQL refuses to run as root, and CI runs as
# root. The URL is `postgres://loom@127.0.0.1:PORT/postgres`.
#
# `--watch PID` stops and removes the cluster once process PID has exited, so a test binary that
# starts a cluster for itself never leaves one behind, however it ends.
#
# Everything but the URL goes to stderr, so `url=$(scripts/postgres.sh start)` works.
set -euo pipefail

# Where clusters are made (a folder the unprivileged user can reach); `stop URL` looks for the
# cluster that serves URL here.
ROOT="${LOOM_PG_ROOT:-/tmp}"
PREFIX="loom-pg."
# The unprivileged user that runs the server when this script runs as root.
SYSTEM_USER="${LOOM_PG_SYSTEM_USER:-loompg}"

say() { echo "postgres.sh: $*" >&2; }
die() {
    say "error: $*"
    exit 1
}

# The folder of PostgreSQL's server binaries (initdb, pg_ctl, postgres), newest version first.
bin_dir() {
    local dir
    for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [[ -x "$dir/initdb" && -x "$dir/pg_ctl" ]]; then
            echo "$dir"
            return 0
        fi
    done
    if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
        dirname "$(command -v initdb)"
        return 0
    fi
    return 1
}

install_postgres() {
    [[ $(id -u) -eq 0 ]] || die "PostgreSQL is not installed and installing it needs root"
    command -v apt-get >/dev/null 2>&1 || die "PostgreSQL is not installed and apt-get is missing"
    say "installing PostgreSQL from the distribution's packages"
    # The Debian package would create and start a cluster of its own on port 5432; only the
    # throwaway clusters below are wanted.
    mkdir -p /etc/postgresql-common
    if [[ ! -e /etc/postgresql-common/createcluster.conf ]]; then
        echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.conf
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update >&2
    apt-get install -y -o Dpkg::Options::=--force-confold postgresql >&2
}

# Runs a command as the user that owns the cluster.
as_owner() {
    if [[ $(id -u) -eq 0 ]]; then
        runuser -u "$SYSTEM_USER" -- "$@"
    else
        "$@"
    fi
}

ensure_user() {
    [[ $(id -u) -eq 0 ]] || return 0
    if ! id "$SYSTEM_USER" >/dev/null 2>&1; then
        say "creating the system user $SYSTEM_USER"
        useradd --system --no-create-home --shell /usr/sbin/nologin "$SYSTEM_USER" >&2
    fi
}

# Whether something listens on 127.0.0.1:PORT.
port_taken() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

start() {
    local watch=""
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --watch)
                [[ $# -ge 2 ]] || die "--watch needs a pid"
                watch="$2"
                shift 2
                ;;
            *) die "unknown argument to start: $1" ;;
        esac
    done
    if [[ -n "$watch" ]] && ! kill -0 "$watch" 2>/dev/null; then
        die "--watch $watch: no such process"
    fi

    local bin
    if ! bin=$(bin_dir); then
        install_postgres
        bin=$(bin_dir) || die "PostgreSQL was installed but initdb/pg_ctl are not found"
    fi
    ensure_user

    local dir
    dir=$(mktemp -d "$ROOT/${PREFIX}XXXXXXXX")
    chmod 700 "$dir"
    if [[ $(id -u) -eq 0 ]]; then
        chown "$SYSTEM_USER" "$dir"
    fi
    as_owner "$bin/initdb" -D "$dir/data" -U loom --auth=trust -E UTF8 --locale=C.UTF-8 \
        >"$dir/initdb.log" 2>&1 || {
        cat "$dir/initdb.log" >&2
        rm -rf "$dir"
        die "initdb failed"
    }

    # A random port, tried until one is free and the server starts on it (another process may
    # take a port between the check and the start).
    local port="" tries
    for tries in 1 2 3 4 5 6 7 8; do
        port=$((20000 + RANDOM % 40000))
        port_taken "$port" && continue
        if as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
            -o "-p $port -c listen_addresses=127.0.0.1 -c unix_socket_directories=$dir/data -c max_connections=200" \
            start </dev/null >/dev/null 2>&1; then
            break
        fi
        port=""
    done
    if [[ -z "$port" ]]; then
        tail -n 20 "$dir/server.log" >&2 || true
        rm -rf "$dir"
        die "the server did not start"
    fi

    local url="postgres://loom@127.0.0.1:$port/postgres"
    echo "$url" >"$dir/url"
    echo "$bin" >"$dir/bin"

    if [[ -n "$watch" ]]; then
        # Detached, with no inherited output, so whoever reads this script's output sees its end.
        setsid bash "$0" __watch "$watch" "$dir" </dev/null >/dev/null 2>&1 &
    fi
    say "started in $dir (log: $dir/server.log)"
    echo "$url"
}

# The cluster folder that serves URL, or the folder itself.
cluster_dir() {
    local target="$1" candidate
    if [[ -d "$target" ]]; then
        echo "$target"
        return 0
    fi
    for candidate in "$ROOT/$PREFIX"*; do
        [[ -f "$candidate/url" ]] || continue
        if [[ "$(cat "$candidate/url")" == "$target" ]]; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

stop() {
    [[ $# -eq 1 ]] || die "usage: stop DIR|URL"
    local dir bin
    dir=$(cluster_dir "$1") || die "no cluster found for $1"
    [[ -f "$dir/url" && -d "$dir/data" ]] || die "$dir is not a cluster made by this script"
    bin=$(cat "$dir/bin" 2>/dev/null || bin_dir)
    if [[ -f "$dir/data/postmaster.pid" ]]; then
        as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop </dev/null >/dev/null 2>&1 ||
            say "pg_ctl stop failed; removing $dir anyway"
    fi
    rm -rf "$dir"
    say "stopped and removed $dir"
}

restart() {
    [[ $# -eq 1 ]] || die "usage: restart DIR|URL"
    local dir bin
    dir=$(cluster_dir "$1") || die "no cluster found for $1"
    [[ -f "$dir/url" && -d "$dir/data" ]] || die "$dir is not a cluster made by this script"
    bin=$(cat "$dir/bin" 2>/dev/null || bin_dir)
    # `restart` reuses the options the server was started with (port, sockets).
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -m fast -w -t 60 restart \
        </dev/null >/dev/null 2>&1 || die "pg_ctl restart failed (log: $dir/server.log)"
    say "restarted $dir"
}

watch() {
    local pid="$1" dir="$2"
    while kill -0 "$pid" 2>/dev/null && [[ -d "$dir" ]]; do
        sleep 1
    done
    [[ -d "$dir" ]] && stop "$dir"
}

case "${1:-}" in
    start) shift && start "$@" ;;
    stop) shift && stop "$@" ;;
    restart) shift && restart "$@" ;;
    __watch) shift && watch "$@" ;;
    *)
        echo "usage: $0 start [--watch PID] | stop DIR|URL | restart DIR|URL" >&2
        exit 2
        ;;
esac
