#!/usr/bin/env bash
# Schema-driven fuzzing of `loom serve`'s HTTP API against its own description
# (`GET /openapi.json`), with schemathesis from PyPI: every operation, generated valid and invalid
# requests, every check (no 5xx, responses that match their schema, invalid data refused,
# undeclared methods a 405, ...; tests/fuzz/schemathesis.toml enables them all and says which
# one does not apply where). Bounded in examples per operation and in time.
#
#   bash tests/fuzz/run.sh                     # what .ci/run runs
#   LOOM_FUZZ_EXAMPLES=200 bash tests/fuzz/run.sh
#
# Environment: LOOM_BIN (default target/release/loom, built when missing), LOOM_FUZZ_VENV
# (default target/fuzz-venv), LOOM_FUZZ_EXAMPLES (examples per operation, default 50),
# LOOM_FUZZ_SECONDS (the run's bound, default 600), PYTHON (default python3).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
loom=${LOOM_BIN:-$root/target/release/loom}
venv=${LOOM_FUZZ_VENV:-$root/target/fuzz-venv}
examples=${LOOM_FUZZ_EXAMPLES:-50}
seconds=${LOOM_FUZZ_SECONDS:-600}
python=${PYTHON:-python3}
# The pinned fuzzer; a new version is a deliberate change.
requirement="schemathesis==4.32.5"

if [[ ! -x "$loom" ]]; then
    cargo build --release -p loom-cli --bin loom
fi
if [[ "$(cat "$venv/.requirement" 2>/dev/null)" != "$requirement" ]]; then
    echo "-- installing $requirement into $venv"
    rm -rf "$venv"
    "$python" -m venv "$venv"
    timeout 600 "$venv/bin/pip" install --disable-pip-version-check -q "$requirement"
    echo "$requirement" > "$venv/.requirement"
fi

work=$(mktemp -d)
server=""
cleanup() {
    if [[ -n "$server" ]]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
db="$work/loom.db"
key=$("$loom" keys create --db "$db" --tenant fuzz --json | "$python" -c 'import json,sys; print(json.load(sys.stdin)["key"])')
port=$("$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# No upstream is reachable: the proxy's routes are not in the description, and the API never
# calls one.
"$loom" serve --db "$db" --auth keys --listen "127.0.0.1:$port" \
    --upstream-openai http://127.0.0.1:9/v1 --upstream-anthropic http://127.0.0.1:9 \
    > "$work/server.log" 2>&1 &
server=$!
url="http://127.0.0.1:$port"
# HTTP without curl (a fresh machine may have none): python's standard library.
http() {
    "$python" - "$@" <<'PY'
import sys, urllib.request, urllib.error
method, url, key, body = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
data = None
if body:
    data = open(body[1:], "rb").read() if body.startswith("@") else body.encode()
req = urllib.request.Request(url, data=data, method=method)
if key:
    req.add_header("Authorization", "Bearer " + key)
    req.add_header("Content-Type", "application/json")
try:
    with urllib.request.urlopen(req, timeout=10) as r:
        r.read()
except urllib.error.HTTPError as e:
    sys.exit(f"{method} {url}: {e.code} {e.read().decode(errors='replace')}")
except OSError as e:
    sys.exit(f"{method} {url}: {e}")
PY
}
for _ in $(seq 100); do
    http GET "$url/healthz" "" "" 2>/dev/null && break
    sleep 0.1
done

# Real data for the path parameters to reach: a session with a call and its result (offloaded
# output to recall), a rendered model call, a memory note and a knowledge-base file.
"$python" - > "$work/session.json" <<'PY'
import hashlib, json
out = "line of build output\n" * 400
print(json.dumps({"id": "demo", "events": [
    {"ts_ms": 1, "kind": "system", "content": "You are an agent."},
    {"ts_ms": 2, "kind": "user", "content": "Fix the build."},
    {"ts_ms": 3, "kind": "assistant", "content": None,
     "tool_calls": [{"id": "c1", "name": "shell", "arguments": "{\"command\": \"make\"}"}]},
    {"ts_ms": 4, "kind": "tool_result", "call_id": "c1", "tool_name": "shell",
     "content": {"text": out}, "is_error": False,
     "stats": {"bytes": len(out.encode()), "lines": out.count("\n"),
               "sha256": hashlib.sha256(out.encode()).hexdigest(), "content_type": "text"}},
]}))
PY
seed() {
    http POST "$url$1" "$key" "$2" || { echo "seeding $1 failed" >&2; exit 1; }
}
seed /loom/v1/sessions "@$work/session.json"
seed /loom/v1/sessions/demo/render '{"model": "gpt-4o", "budget": 4000}'
seed /loom/v1/memory/items '{"text": "the build needs make 4.3", "session": "demo"}'
seed /loom/v1/kb/files '{"path": "docs/build.md", "content": "# Build\n\nRun make.\n"}'

echo "-- schemathesis: $examples examples per operation, at most ${seconds}s"
set +e
timeout "$seconds" "$venv/bin/schemathesis" --config-file "$root/tests/fuzz/schemathesis.toml" \
    run "$url/openapi.json" \
    --max-examples "$examples" \
    --header "Authorization: Bearer $key" \
    --seed 1 \
    --request-timeout 10 \
    --no-color \
    --suppress-health-check all \
    2>&1 | tee "$work/fuzz.log"
rc=${PIPESTATUS[0]}
set -e
if [[ $rc -ne 0 ]]; then
    echo "-- the server's log (last 40 lines)"
    tail -n 40 "$work/server.log"
    echo "fuzz: schemathesis failed (exit $rc)" >&2
    exit "$rc"
fi
echo "fuzz: 0 failures"
