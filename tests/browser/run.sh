#!/usr/bin/env bash
# The web inspector (/ui) in a real browser: Debian's Chromium driven by Playwright from the npm
# registry (pinned in package.json; Playwright's own browsers are never downloaded). Starts
# `loom serve --auth keys` on an ephemeral loopback port with a seeded store (a shared trace
# rendered at a small budget, so it has compaction points and stubs; a generated session of
# 1,000 events and 500 model calls for the page-load figures; one call proxied to a stand-in
# upstream, upstream.py, which keeps the bytes it received), then runs test.mjs: sign in, find
# the session, open a model call and check its budget bar against the receipt, open a stubbed
# result and check its original bytes against recall, open the proxied call and check the request
# shown is the one the upstream received, check a second tenant sees none of it, measure page
# loads (every one of 5 per view < 300 ms) and save screenshots to docs/images/inspector-*.png.
#
#   bash tests/browser/run.sh            # what .ci/run runs
#
# Environment: LOOM_BIN (default target/release/loom, built when missing), CHROMIUM (default:
# chromium on the PATH, installed with apt-get when missing), LOOM_BROWSER_SHOTS (where the
# screenshots go, default docs/images), PYTHON (default python3).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here="$root/tests/browser"
cd "$root"
loom=${LOOM_BIN:-$root/target/release/loom}
python=${PYTHON:-python3}
shots=${LOOM_BROWSER_SHOTS:-$root/docs/images}

if [[ ! -x "$loom" ]]; then
    cargo build --release -p loom-cli --bin loom
fi

chromium=${CHROMIUM:-$(command -v chromium || true)}
if [[ -z "$chromium" ]]; then
    echo "-- installing Debian's chromium"
    export DEBIAN_FRONTEND=noninteractive
    timeout 300 apt-get install -y -q chromium >/dev/null 2>&1 \
        || { timeout 120 apt-get update -q >/dev/null && timeout 300 apt-get install -y -q chromium >/dev/null; }
    chromium=$(command -v chromium)
fi
echo "-- $("$chromium" --version 2>/dev/null || echo "$chromium")"

if ! command -v npm >/dev/null 2>&1; then
    echo "-- no npm: installing Debian's nodejs and npm"
    export DEBIAN_FRONTEND=noninteractive
    timeout 120 apt-get update -q >/dev/null
    timeout 600 apt-get install -y -q nodejs npm >/dev/null
fi

export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
want=$(node -e 'console.log(require(process.argv[1]).dependencies.playwright)' "$here/package.json")
have=$(node -e 'try { console.log(require(process.argv[1]).version) } catch { console.log("") }' \
    "$here/node_modules/playwright/package.json")
if [[ "$have" != "$want" ]]; then
    echo "-- installing playwright@$want into tests/browser/node_modules"
    (cd "$here" && timeout 300 npm install --no-audit --no-fund --loglevel=error)
fi

work=$(mktemp -d)
server=""
upstream=""
cleanup() {
    if [[ -n "$server" ]]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
    if [[ -n "$upstream" ]]; then kill "$upstream" 2>/dev/null || true; wait "$upstream" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
db="$work/loom.db"
newkey() {
    "$loom" keys create --db "$db" --tenant "$1" --json 2>/dev/null \
        | "$python" -c 'import json,sys; print(json.load(sys.stdin)["key"])'
}
key=$(newkey alpha)
other=$(newkey beta)
# A stand-in upstream that keeps every body it receives, for the request "as sent".
mkdir -p "$work/received"
"$python" "$here/upstream.py" "$work/upstream.port" "$work/received" &
upstream=$!
for _ in $(seq 100); do [[ -s "$work/upstream.port" ]] && break; sleep 0.1; done
uport=$(cat "$work/upstream.port")
port=$("$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
LOOM_UPSTREAM_OPENAI_KEY=sk-browser-test "$loom" serve --db "$db" --auth keys --listen "127.0.0.1:$port" \
    --upstream-openai "http://127.0.0.1:$uport/v1" --upstream-anthropic http://127.0.0.1:9 \
    > "$work/server.log" 2>&1 &
server=$!
url="http://127.0.0.1:$port"
for _ in $(seq 100); do
    "$python" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1)' "$url/healthz" \
        2>/dev/null && break
    sleep 0.1
done

echo "-- seeding: a shared trace at an 8,000-token budget, and a generated session"
trace=$("$python" "$here/seed.py" trace "$url" "$key" swe-trace \
    "$root/../shared/traces/miniswe_gemini3pro_swebv.jsonl" 23 8000)
generated=$("$python" "$here/seed.py" generated "$url" "$key" generated-1000 1000 500)
proxied=$("$python" "$here/seed.py" proxied "$url" "$key" proxied-call)
echo "   $trace"
echo "   $generated"
echo "   $proxied"

mkdir -p "$shots"
set +e
LOOM_URL="$url" LOOM_KEY="$key" LOOM_OTHER_KEY="$other" CHROMIUM="$chromium" \
    LOOM_TRACE="$trace" LOOM_GENERATED="$generated" LOOM_SHOTS="$shots" \
    LOOM_PROXIED="$proxied" LOOM_RECEIVED="$work/received/received-1.json" \
    timeout 240 node "$here/test.mjs"
rc=$?
set -e
if [[ $rc -ne 0 ]]; then
    echo "-- the server's log (last 30 lines)"
    tail -n 30 "$work/server.log"
    echo "browser: failed (exit $rc)" >&2
    exit "$rc"
fi
echo "browser: ok"
