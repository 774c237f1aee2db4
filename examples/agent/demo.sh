#!/usr/bin/env bash
# The offline demo of `loom run`: a scripted agent fixes a bug in a copy of examples/agent/workspace,
# reads files, runs a registered script and the tests in the sandbox, hands a search to a child
# agent, keeps a large output offloaded, reaches a compaction point, and pauses to ask before
# deleting a file. Run from the repository's root:
#
#     bash examples/agent/demo.sh            # uses target/release/loom, or `loom` on PATH
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
loom=${LOOM_BIN:-}
if [ -z "$loom" ]; then
    if [ -x "$here/../../target/release/loom" ]; then loom="$here/../../target/release/loom"; else loom=loom; fi
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$here/workspace" "$work/repo"
(cd "$work/repo" && git init -q && git add . && git -c user.name=demo -c user.email=demo@example.com commit -qm start)
export LOOM_DB="$work/demo.db"
run=(--provider scripted --script "$here/script.json" --config "$here/config.toml" --workspace "$work/repo")

echo "== loom run (pauses before \`rm build.log\`)"
set +e
session=$("$loom" run "${run[@]}" --session demo "Make test_calc.py pass and clean up the stale build log." | head -n 1)
status=$?
set -e
echo "session: $session (exit $status: 3 means a call waits for approval)"
call=$("$loom" log demo --json | python3 -c '
import json, sys
for e in json.load(sys.stdin):
    m = e.get("metadata") or {}
    if e.get("kind") == "direct_message" and m.get("loom.approval") == "request":
        print(m["call_id"])' | tail -n 1)
echo "== loom approve demo $call --once"
"$loom" approve demo "$call" --once
echo "== loom run --resume demo"
"$loom" run "${run[@]}" --resume demo
echo "== the fix"
cat "$work/repo/calc.py"
echo "== what Loom did with the long listing (event 11) in each model call: loom explain demo --event 11"
"$loom" explain demo --event 11 | head -n 20
