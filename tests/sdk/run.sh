#!/usr/bin/env bash
# Tests of `loom serve` with the official Python SDKs (openai, anthropic), and the crash test.
#
# Makes (or reuses) a virtualenv with the pinned SDKs, builds `loom` and `loom-mock-upstream`
# (release), starts the mock and `loom serve` on free loopback ports with a fresh database, runs
# pytest on tests/sdk, and stops everything it started, whatever happens. Exits non-zero when a
# test fails. Every wait is bounded.
#
# Environment: PYTHON (default python3), LOOM_SDK_VENV (default target/sdk-venv),
# CARGO_TARGET_DIR, LOOM_SDK_SKIP_BUILD=1 (use the binaries already built), and any pytest
# arguments after the script's name (e.g. `bash tests/sdk/run.sh -k chat`).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
target=${CARGO_TARGET_DIR:-$root/target}
venv=${LOOM_SDK_VENV:-$target/sdk-venv}
python=${PYTHON:-python3}
requirements=tests/sdk/requirements.txt

# Bounds, in seconds.
pip_timeout=600
build_timeout=3600
start_timeout=30
pytest_timeout=900

work=$(mktemp -d "${TMPDIR:-/tmp}/loom-sdk.XXXXXX")
pids=()
status=0

cleanup() {
    status=$?
    trap - EXIT INT TERM
    for pid in "${pids[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
        for _ in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.2
        done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    if [ "$status" -ne 0 ]; then
        for log in "$work"/*.log; do
            [ -f "$log" ] || continue
            echo "--- last lines of $(basename "$log")"
            tail -n 40 "$log"
        done
    fi
    rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "-- python environment ($venv)"
# A virtualenv when the interpreter can make one; otherwise (a Debian python without
# python3-venv) the packages go into a folder of their own on PYTHONPATH.
if ! cmp -s "$requirements" "$venv/.loom-requirements"; then
    rm -rf "$venv"
    if "$python" -m venv "$venv" >/dev/null 2>&1 && [ -x "$venv/bin/python" ]; then
        timeout "$pip_timeout" "$venv/bin/python" -m pip install --disable-pip-version-check -q -r "$requirements"
    else
        echo "no venv module; installing into $venv/site"
        rm -rf "$venv"
        mkdir -p "$venv/site"
        timeout "$pip_timeout" "$python" -m pip install --disable-pip-version-check -q \
            --target "$venv/site" -r "$requirements"
    fi
    cp "$requirements" "$venv/.loom-requirements"
fi
if [ -x "$venv/bin/python" ]; then
    py=$venv/bin/python
else
    py=$python
    export PYTHONPATH="$venv/site${PYTHONPATH:+:$PYTHONPATH}"
fi
"$py" -c 'import openai, anthropic, pytest; print("openai", openai.__version__, "anthropic", anthropic.__version__, "pytest", pytest.__version__)'

if [ "${LOOM_SDK_SKIP_BUILD:-0}" != 1 ]; then
    echo "-- building loom and loom-mock-upstream (release)"
    timeout "$build_timeout" cargo build --release -p loom-cli --bin loom -p loom-mock-upstream --bin loom-mock-upstream
fi
loom_bin=$target/release/loom
mock_bin=$target/release/loom-mock-upstream

# start NAME COMMAND...: runs a server in the background, waits for its `listening on URL` line,
# and sets $url.
start() {
    local name=$1
    shift
    "$@" >"$work/$name.out" 2>"$work/$name.log" </dev/null &
    pids+=("$!")
    local pid=$!
    local waited=0
    url=""
    while [ -z "$url" ]; do
        url=$(sed -n 's/^listening on \(http:\/\/[^ ]*\)$/\1/p' "$work/$name.out" | head -n 1)
        [ -n "$url" ] && break
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "$name exited before listening" >&2
            return 1
        fi
        if [ "$waited" -ge $((start_timeout * 10)) ]; then
            echo "$name printed no address within ${start_timeout}s" >&2
            return 1
        fi
        sleep 0.1
        waited=$((waited + 1))
    done
    echo "$name: $url"
}

echo "-- starting the mock upstream and loom serve"
start mock "$mock_bin" --listen 127.0.0.1:0
mock_url=$url
start loom "$loom_bin" serve --db "$work/main.db" --listen 127.0.0.1:0 \
    --upstream-openai "$mock_url/v1" --upstream-anthropic "$mock_url" --auth none
loom_url=$url
loom_pid=${pids[-1]}

echo "-- pytest tests/sdk"
set +e
LOOM_BIN=$loom_bin LOOM_MOCK_BIN=$mock_bin LOOM_SDK_MOCK_URL=$mock_url LOOM_SDK_LOOM_URL=$loom_url \
    LOOM_SDK_WORK=$work \
    timeout "$pytest_timeout" "$py" -m pytest tests/sdk -p no:cacheprovider -q -rfE "$@" &
# In the background and waited for, so that an interrupted run stops pytest too (its own servers
# die with it).
pids+=("$!")
wait "$!"
result=$?
set -e
if [ "$result" -eq 124 ]; then
    echo "pytest did not finish within ${pytest_timeout}s" >&2
fi
if [ "$result" -eq 0 ]; then
    # SIGTERM is a graceful stop: loom serve must exit 0 within a few seconds.
    kill -TERM "$loom_pid"
    for _ in $(seq 1 100); do
        kill -0 "$loom_pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$loom_pid" 2>/dev/null; then
        echo "loom serve did not stop within 10s of SIGTERM" >&2
        exit 1
    fi
    loom_status=0
    wait "$loom_pid" || loom_status=$?
    if [ "$loom_status" -ne 0 ]; then
        echo "loom serve exited with status $loom_status after SIGTERM" >&2
        exit 1
    fi
    echo "-- loom serve stopped cleanly on SIGTERM"
fi
exit "$result"
