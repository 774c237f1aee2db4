#!/usr/bin/env bash
# The real-client suite: real agent CLIs (Claude Code, Codex, opencode, aider, mini-swe-agent,
# qwen-code; Gemini CLI on request, direct only until Loom speaks Gemini) doing a short coding
# task against a scripted mock provider, directly and through `loom serve`.
#
# For every client x mode x scenario it makes a scratch git repo (calc.py with two bugs and
# test_calc.py), starts the mock upstream (tests/clients/mock_upstream.py) and, in the `observe`
# and `fit` modes, `loom serve` on a fresh database with a pass-through recorder in front of it
# (tests/clients/recorder.py), runs the client non-interactively with its default model, and
# checks: the client exited 0, calc.py was really edited and the test passes, the test's output
# reached the model (the mock saw it in a tool result), and through Loom (tests/clients/check.py):
# no error replies, every tool call paired with its result, thinking/reasoning replayed byte for
# byte, and in `observe` every body byte-identical. One line per run, then a summary; exits 1 when
# any run failed. Every wait is bounded and everything started is stopped on exit.
# Each run also writes figures.json beside its logs (tests/clients/figures.py: upstream requests
# and input tokens, the largest request, Loom's sessions and forks, its 4xx/409 replies, orphaned
# tool calls, requests over the budget or the window), and a table of them ends the output.
#
# Usage: bash tests/clients/run.sh [--clients claude,codex,opencode,aider,mini,qwen,codex2,gemini]
#            [--modes direct,observe,fit,files] [--scenarios short,long,edits,recall,compact]
#            [--budget N|auto]
#            [--capture] [--no-install]
# --budget N puts `budget = N` (the fit budget for requests without X-Loom-Budget) in the config
# of the fit runs; `auto` uses the per-client budgets below (about 30% of the client's whole
# `long` conversation). Without it, fit runs use the model's window.
# The `files` mode is `fit` with `[recall] mode = "files"`: offloaded outputs are written under the
# run's folder and stubs name their paths. With the `recall` scenario (`long`, then one more step:
# the mock asks the client to read the file the last stub names, with its own file tool) a files
# run passes only when the file is byte-identical to a result the model was shown whole and the
# client's read of it came back (the mock's recall.json).
# Environment: LOOM_CLIENTS, LOOM_CLIENTS_MODES, LOOM_CLIENTS_SCENARIOS (same lists),
#   LOOM_CLIENTS_BUDGET (as --budget), LOOM_CLIENTS_CAPTURE=1 (rewrite tests/clients/fixtures from
#   the direct runs), LOOM_CLIENTS_DIR (default target/clients), LOOM_CLIENTS_WORK (where the
#   runs' logs go; default LOOM_CLIENTS_DIR/runs/last, emptied first), LOOM_BIN (default
#   target/release/loom; never built here), PYTHON (default python3).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$(dirname "$0")/../.."
root=$PWD
dir=${LOOM_CLIENTS_DIR:-$root/target/clients}
loom_bin=${LOOM_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/loom}
python=${PYTHON:-python3}

clients=${LOOM_CLIENTS:-claude,codex,opencode,aider,mini,qwen}
modes=${LOOM_CLIENTS_MODES:-direct,observe,fit}
scenarios=${LOOM_CLIENTS_SCENARIOS:-short,long,edits}
capture=${LOOM_CLIENTS_CAPTURE:-0}
budget=${LOOM_CLIENTS_BUDGET:-}
install=1
while [ $# -gt 0 ]; do
    case $1 in
        --clients) clients=$2; shift 2 ;;
        --modes) modes=$2; shift 2 ;;
        --scenarios) scenarios=$2; shift 2 ;;
        --budget) budget=$2; shift 2 ;;
        --capture) capture=1; shift ;;
        --no-install) install=0; shift ;;
        -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done

# Bounds, in seconds.
install_timeout=1800
start_timeout=30
declare -A client_timeout=([short]=240 [long]=420 [edits]=600 [recall]=420 [compact]=600)
declare -A fixture_limit=([short]=0 [long]=4 [edits]=10 [recall]=4 [compact]=4)   # requests kept per run (0: all)

# `--budget auto`: about 30% of each client's whole `long` conversation, i.e. of the largest
# request of its `observe` run (o200k_base tokens of the body, figures.json `largest_request`:
# Claude Code 387,821, Codex 377,290, opencode 378,572, aider 348,274, mini-swe-agent 95,095 on
# 2026-11-28; qwen-code 159,103 on 2026-12-07: its read_file stops at ~25 KB of a 40 KB note and it
# clears old tool results itself past 500,000 characters of them). The same budget serves every
# scenario (short and edits stay under it). qwen-code's first request is 17,585 tokens (system
# prompt 6.5k, 14 tools 8.9k, harness context 2.9k), so its 48,000 leaves room for ~4 notes.
declare -A auto_budget=([claude]=115000 [codex]=113000 [codex2]=113000 [opencode]=113000 [aider]=104000 [mini]=28000 [qwen]=48000 [gemini]=60000)
case $budget in
    ''|auto) ;;
    *[!0-9]*|0) echo "--budget takes a positive number of tokens or auto, not $budget" >&2; exit 2 ;;
esac

work=${LOOM_CLIENTS_WORK:-$dir/runs/last}
rm -rf "$work"
mkdir -p "$work"
# Absolute: each client runs from its own scratch repo.
work=$(cd "$work" && pwd)
pids=()
status=0

stop_pid() {
    local pid=$1
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

cleanup() {
    status=$?
    trap - EXIT INT TERM
    for pid in "${pids[@]}"; do
        stop_pid "$pid"
    done
    echo "-- logs and records of this run: $work"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start NAME LOGDIR COMMAND...: a server in the background; waits for `listening on URL`, sets $url
# and $started.
start() {
    local name=$1 logdir=$2
    shift 2
    "$@" >"$logdir/$name.out" 2>"$logdir/$name.log" </dev/null &
    started=$!
    pids+=("$started")
    local waited=0
    url=""
    while :; do
        url=$(sed -n 's/^listening on \(http:\/\/[^ ]*\)$/\1/p' "$logdir/$name.out" 2>/dev/null | head -n 1)
        [ -n "$url" ] && return 0
        if ! kill -0 "$started" 2>/dev/null; then
            echo "$name exited before listening: $(tail -n 3 "$logdir/$name.log" | tr '\n' ' ')" >&2
            return 1
        fi
        if [ "$waited" -ge $((start_timeout * 10)) ]; then
            echo "$name printed no address within ${start_timeout}s" >&2
            return 1
        fi
        sleep 0.1
        waited=$((waited + 1))
    done
}

if [ "$install" = 1 ]; then
    echo "-- installing the clients (tests/clients/install.sh)"
    LOOM_CLIENTS_ONLY=${clients//,/ } timeout "$install_timeout" bash "$here/install.sh" | tee "$work/versions.txt"
fi
bin_claude=$dir/npm/claude/node_modules/.bin/claude
bin_codex=$dir/npm/codex/node_modules/.bin/codex
bin_opencode=$dir/npm/opencode/node_modules/.bin/opencode
bin_aider=$dir/venv/aider/bin/aider
bin_mini=$dir/venv/mini/bin/mini
bin_qwen=$dir/npm/qwen/node_modules/.bin/qwen
bin_gemini=$dir/npm/gemini/node_modules/.bin/gemini

case ",$modes," in
    *,observe,*|*,fit,*|*,files,*)
        if [ ! -x "$loom_bin" ]; then
            echo "no $loom_bin: build it first (cargo build --release -p loom-cli --bin loom); Loom runs will fail" >&2
        else
            # A copy, so that a rebuild during the suite changes nothing under it.
            cp "$loom_bin" "$work/loom"
            loom_bin=$work/loom
            echo "-- loom: $("$loom_bin" --version 2>/dev/null || echo '?') ($(stat -c %y "${LOOM_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/loom}" | cut -d. -f1))"
        fi ;;
esac

task="calc.py has bugs: test_calc.py fails. Fix calc.py so that \`python3 test_calc.py\` passes, then run the test."
task_aider="calc.py has bugs: test_calc.py fails. Fix calc.py so that \`python3 test_calc.py\` passes."

# The clients. Each runs in the scratch repo ($d/repo) with HOME=$d/home, talking to $base (the
# mock, or the recorder in front of Loom). Non-essential traffic (updates, telemetry) is off; the
# model is each client's default.
run_claude() {
    local base=$1 d=$2 scenario=$3
    local sandbox=()
    [ "$(id -u)" = 0 ] && sandbox=(IS_SANDBOX=1)  # --dangerously-skip-permissions refuses root otherwise
    # `compact`: Claude Code compacts its own history when its context passes the window.
    [ "$scenario" = compact ] && sandbox+=(CLAUDE_CODE_AUTO_COMPACT_WINDOW=100000)
    env "${sandbox[@]}" ANTHROPIC_BASE_URL="$base" ANTHROPIC_API_KEY=dummy \
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_TELEMETRY=1 DISABLE_AUTOUPDATER=1 \
        DISABLE_ERROR_REPORTING=1 \
        "$bin_claude" -p "$task" --dangerously-skip-permissions
}

run_codex() {
    codex_as loomtest "$@"
}

# Codex with its provider named "OpenAI": it compacts remotely (v2), ending a request with a
# `compaction_trigger` item and sending the `compaction` item it gets back in place of its history.
run_codex2() {
    codex_as OpenAI "$@"
}

# codex_as PROVIDER_NAME BASE DIR SCENARIO: Codex with its provider so named. `compact`: it
# compacts past 30,000 tokens (locally unless the name is "OpenAI").
codex_as() {
    local name=$1 base=$2 d=$3 scenario=$4
    mkdir -p "$d/codex-home"
    local limit=""
    [ "$scenario" = compact ] && limit="model_auto_compact_token_limit = 30000"
    cat >"$d/codex-home/config.toml" <<EOF
model_provider = "loomtest"
$limit

[model_providers.loomtest]
name = "$name"
base_url = "$base/v1"
wire_api = "responses"
env_key = "OPENAI_API_KEY"
EOF
    CODEX_HOME=$d/codex-home OPENAI_API_KEY=dummy \
        "$bin_codex" exec --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox "$task"
}

run_opencode() {
    local base=$1 d=$2 scenario=$3
    # `compact`: a 60,000-token window, past which opencode compacts its own history.
    local limit=""
    [ "$scenario" = compact ] && limit=', "limit": {"context": 60000, "output": 8000}'
    cat >"$d/opencode.json" <<EOF
{
  "\$schema": "https://opencode.ai/config.json",
  "provider": {
    "loomtest": {
      "npm": "@ai-sdk/openai-compatible",
      "name": "Loom test upstream",
      "options": {"baseURL": "$base/v1", "apiKey": "dummy"},
      "models": {"gpt-4.1": {"name": "gpt-4.1", "tool_call": true$limit}}
    }
  },
  "model": "loomtest/gpt-4.1",
  "autoupdate": false,
  "share": "disabled"
}
EOF
    OPENCODE_CONFIG=$d/opencode.json OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_MODELS_FETCH=1 \
        OPENCODE_DISABLE_LSP_DOWNLOAD=1 XDG_DATA_HOME=$d/xdg/data XDG_CONFIG_HOME=$d/xdg/config \
        XDG_CACHE_HOME=$d/xdg/cache XDG_STATE_HOME=$d/xdg/state \
        "$bin_opencode" run --auto "$task"
}

run_aider() {
    local base=$1 d=$2 scenario=$3
    local args=()
    if [ "$scenario" = long ] || [ "$scenario" = compact ]; then
        for f in notes/part_*.txt; do args+=(--read "$f"); done
    fi
    if [ "$scenario" = compact ]; then
        # aider summarises a chat history past --max-chat-history-tokens (a summarizer request
        # of its own, then a window opening "I spoke to you previously about a number of
        # things."), but drops the summary when the history grew while it was written, as it
        # does on every turn of one run. So the conversation is resumed the next day: a first
        # run fixes `add`, a second restores the chat, summarises it before its first request
        # and goes on with the failing test (neither runs the test itself: --auto-test changes
        # the system prompt, which would make the second run another conversation). aider keeps read-only files in a set, ordered by
        # Python's string hash, so both runs take one hash seed to send them in one order.
        export PYTHONHASHSEED=0
        aider_as "$base" "$task_aider" "${args[@]}" || return
        aider_as "$base" "python3 test_calc.py still fails: mul(2, 3) returned 8. Fix it." \
            --restore-chat-history --max-chat-history-tokens 50 "${args[@]}"
        return
    fi
    aider_as "$base" "$task_aider" --auto-test "${args[@]}"
}

# aider_as BASE MESSAGE ARGS...: one headless aider run on calc.py and test_calc.py.
aider_as() {
    local base=$1 message=$2
    shift 2
    OPENAI_API_KEY=dummy OPENAI_API_BASE=$base/v1 LITELLM_LOCAL_MODEL_COST_MAP=True \
        "$bin_aider" --message "$message" --yes-always --test-cmd "python3 test_calc.py" \
        --no-check-update --analytics-disable --no-show-release-notes --no-pretty \
        "$@" calc.py test_calc.py
}

run_mini() {
    local base=$1 d=$2
    # mini-swe-agent has no default model: it asks at setup. openai/gpt-4.1 through litellm.
    MSWEA_GLOBAL_CONFIG_DIR=$d/mini-config MSWEA_CONFIGURED=true MSWEA_COST_TRACKING=ignore_errors \
        MSWEA_SILENT_STARTUP=1 LITELLM_LOCAL_MODEL_COST_MAP=True OPENAI_API_KEY=dummy \
        OPENAI_API_BASE=$base/v1 OPENAI_BASE_URL=$base/v1 \
        "$bin_mini" -m openai/gpt-4.1 -t "$task" -y --exit-immediately -l 0 -o "$d/mini-trajectory.json"
}

run_qwen() {
    local base=$1 d=$2
    # qwen-code's OpenAI-compatible provider (--auth-type openai) has no default model: it takes
    # OPENAI_MODEL. Its own table gives every gpt-* but gpt-5 a 128k window, and it compacts the
    # conversation at 85% of it (in `long`, every ~100k tokens, which restarts the mock's script):
    # contextWindowSize gives gpt-4.1's real window instead. Usage statistics (Aliyun RUM),
    # telemetry and update checks are off.
    mkdir -p "$d/home/.qwen"
    cat >"$d/home/.qwen/settings.json" <<EOF
{
  "general": {"enableAutoUpdate": false},
  "privacy": {"usageStatisticsEnabled": false},
  "telemetry": {"enabled": false},
  "model": {"generationConfig": {"contextWindowSize": 1047576}}
}
EOF
    OPENAI_API_KEY=dummy OPENAI_BASE_URL=$base/v1 OPENAI_MODEL=gpt-4.1 \
        QWEN_USAGE_STATISTICS_ENABLED=false QWEN_CODE_SUPPRESS_YOLO_WARNING=1 \
        "$bin_qwen" --auth-type openai --yolo "$task"
}

run_gemini() {
    local base=$1 d=$2
    # Gemini CLI's Gemini API key auth (`gemini-api-key`; without it headless mode exits 41) with
    # its base URL moved to $base; its default model (the router's pick). Usage statistics
    # (Clearcut), telemetry, update checks and the folder-trust check are off. Its chat
    # compression splits the history only at a user text turn, so one headless prompt never
    # compresses (`compact` plays as `long`); past ~50k tokens of tool outputs it masks the older
    # ones itself (`<tool_output_masked>`).
    mkdir -p "$d/home/.gemini"
    cat >"$d/home/.gemini/settings.json" <<EOF
{
  "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": false}},
  "general": {"enableAutoUpdate": false, "enableAutoUpdateNotification": false},
  "privacy": {"usageStatisticsEnabled": false},
  "telemetry": {"enabled": false}
}
EOF
    GOOGLE_GEMINI_BASE_URL=$base GEMINI_API_KEY=dummy GEMINI_CLI_HOME=$d/home \
        GEMINI_TELEMETRY_ENABLED=false GEMINI_CLI_TRUST_WORKSPACE=true \
        "$bin_gemini" --yolo -p "$task"
}

export -f run_claude run_codex run_codex2 codex_as run_opencode run_aider aider_as run_mini run_qwen run_gemini
export bin_claude bin_codex bin_opencode bin_aider bin_mini bin_qwen bin_gemini task task_aider

# What the mock must see in a request for the test to count as run: the passing test's output, or
# for aider (which reports only a failing test back to the model) the failing one's.
marker() {
    case $1 in
        aider) echo "mul(2, 3) returned 8" ;;
        *) echo "calc tests passed" ;;
    esac
}

results=()
failed=0

# run_one CLIENT MODE SCENARIO
run_one() {
    local client=$1 mode=$2 scenario=$3
    local id=$client-$mode-$scenario
    local d=$work/$id
    mkdir -p "$d/home"
    local t0=$SECONDS
    local run_pids=() problems=() loom_url=""
    local run_budget=$budget
    [ "$budget" = auto ] && run_budget=${auto_budget[$client]:-}
    [ "$mode" = fit ] || [ "$mode" = files ] || run_budget=""
    # What Loom is configured as, and what the checks take it for.
    local loom_mode=$mode
    [ "$mode" = files ] && loom_mode=fit
    "$python" "$here/mock_upstream.py" make-repo "$d/repo" --scenario "$scenario"
    start mock "$d" "$python" "$here/mock_upstream.py" serve --listen 127.0.0.1:0 --record "$d/mock" \
        --scenario "$scenario" --workdir "$d/repo" || { problems+=("mock did not start"); }
    run_pids+=("$started")
    local base=$url
    if [ "$mode" != direct ] && [ ${#problems[@]} -eq 0 ]; then
        printf 'mode = "%s"\n' "$loom_mode" >"$d/loom.toml"
        if [ "$loom_mode" = fit ] && [ -n "$run_budget" ]; then
            printf 'budget = %s\n' "$run_budget" >>"$d/loom.toml"
        fi
        if [ "$mode" = files ]; then
            printf '\n[recall]\nmode = "files"\nfolder = "%s"\n' "$d/recall" >>"$d/loom.toml"
        fi
        if start loom "$d" "$loom_bin" serve --db "$d/loom.db" --listen 127.0.0.1:0 --config "$d/loom.toml" \
            --upstream-openai "$base/v1" --upstream-anthropic "$base" --upstream-gemini "$base" \
            --auth none; then
            run_pids+=("$started")
            loom_url=$url
            start recorder "$d" "$python" "$here/recorder.py" --listen 127.0.0.1:0 --upstream "$url" \
                --record "$d/client" || problems+=("recorder did not start")
            run_pids+=("$started")
            base=$url
        else
            problems+=("loom serve did not start: $(tail -n 2 "$d/loom.log" 2>/dev/null | tr '\n' ' ')")
        fi
    fi
    local rc=0
    if [ ${#problems[@]} -eq 0 ]; then
        (cd "$d/repo" && HOME=$d/home timeout "${client_timeout[$scenario]}" \
            bash -c '"run_$0" "$@"' "$client" "$base" "$d" "$scenario" \
            >"$d/client.out" 2>"$d/client.err" </dev/null) || rc=$?
        if [ "$rc" -eq 124 ]; then
            problems+=("timed out after ${client_timeout[$scenario]}s")
        elif [ "$rc" -ne 0 ]; then
            problems+=("exit $rc")
        fi
        local why
        if ! why=$("$python" "$here/mock_upstream.py" verify-repo "$d/repo" --scenario "$scenario" 2>&1); then
            problems+=("$why")
        fi
        local m
        m=$(marker "$client")
        if ! grep -qsF -- "$m" "$d"/mock/[0-9][0-9][0-9][0-9].json; then
            problems+=("the test's output never reached the model")
        fi
    fi
    # Loom's counters (fit_check_failed among them) for figures.py, before it stops.
    if [ -n "$loom_url" ]; then
        timeout 20 "$python" -c 'import sys, urllib.request
sys.stdout.write(urllib.request.urlopen(sys.argv[1] + "/metrics", timeout=10).read().decode())' \
            "$loom_url" >"$d/metrics.txt" 2>/dev/null || rm -f "$d/metrics.txt"
        # The fallback is a last line of defence: a fitted body that failed Loom's own check
        # is a failure of the run.
        local failed_check
        failed_check=$(awk '!/^#/ && /kind="fit_check_failed"/ {n += $NF} END {print n + 0}' \
            "$d/metrics.txt" 2>/dev/null || echo 0)
        [ "${failed_check%.*}" -gt 0 ] &&
            problems+=("$failed_check fitted bodies failed Loom's check (fit_check_failed)")
    fi
    for pid in "${run_pids[@]}"; do stop_pid "$pid"; done
    if [ "$mode" != direct ] && [ -d "$d/client" ]; then
        if ! "$python" "$here/check.py" --mock "$d/mock" --client "$d/client" --mode "$loom_mode" \
            --scenario "$scenario" --json "$d/check.json" >"$d/check.txt" 2>&1; then
            problems+=("check.py: $(grep -c '^  [a-z]*: ' "$d/check.txt" | tr -d ' ') problem lines")
        fi
    fi
    # Gemini CLI has no Loom runs yet (Loom does not speak Gemini): its direct runs check what
    # reached the mock instead (every functionCall answered by its functionResponse, every
    # thoughtSignature one the mock emitted).
    if [ "$mode" = direct ] && [ "$client" = gemini ] && [ -d "$d/mock" ]; then
        if ! "$python" "$here/check.py" --mock "$d/mock" --mode direct --scenario "$scenario" \
            --json "$d/check.json" >"$d/check.txt" 2>&1; then
            problems+=("check.py: $(grep -c '^  [a-z]*: ' "$d/check.txt" | tr -d ' ') problem lines")
        fi
    fi
    if [ "$capture" = 1 ] && [ "$mode" = direct ] && [ -d "$d/mock" ]; then
        "$python" "$here/mock_upstream.py" export "$d/mock" "$here/fixtures/$client/$scenario" \
            --limit "${fixture_limit[$scenario]}" >/dev/null
    fi
    if [ "$mode" = files ] && [ "$scenario" = recall ] && [ "$rc" -eq 0 ]; then
        local why
        if ! why=$("$python" - "$d/mock/recall.json" "$d/recall" <<'PY' 2>&1
import json, os, sys
try:
    r = json.load(open(sys.argv[1]))
except OSError:
    sys.exit("the mock never saw the client read a saved output back")
folder = os.path.realpath(sys.argv[2]) + os.sep
if not r["stub"]:
    sys.exit("no stub named a file")
if not os.path.realpath(r["path"]).startswith(folder):
    sys.exit(f"the stub names {r['path']}, outside the recall folder")
if not r["identical"]:
    sys.exit(f"{r['path']} is not byte-identical to a result the model was shown {r['error']}")
if not r["read_back"]:
    sys.exit(f"the client's read of {r['path']} did not come back")
print("read back", r["path"])
PY
        ); then
            problems+=("recall: $why")
        fi
    fi
    "$python" "$here/figures.py" run "$d" --mode "$loom_mode" ${run_budget:+--budget "$run_budget"} \
        --loom "$loom_bin" --exit "$rc" --passed $(( ${#problems[@]} == 0 )) 2>>"$d/figures.err" \
        || echo "  (figures.py failed: $(tail -n 1 "$d/figures.err"))"
    local secs=$((SECONDS - t0))
    local calls
    calls=$(find "$d/mock" -name '[0-9][0-9][0-9][0-9].json' 2>/dev/null | wc -l)
    local info=""
    [ -f "$d/check.txt" ] && info=$(sed -n 's/^  sessions: //p' "$d/check.txt" | head -n 1)
    [ -n "$info" ] && info="; $info"
    # The log's own lines for fitted bodies that failed Loom's check (the counter above fails
    # the run), said beside the sessions.
    local unfitted=0
    [ -f "$d/loom.log" ] && unfitted=$(grep -c "failed Loom's check" "$d/loom.log" || true)
    [ "${unfitted:-0}" -gt 0 ] && info="$info; $unfitted fitted bodies failed Loom's check, sent unfitted"
    if [ ${#problems[@]} -eq 0 ]; then
        results+=("PASS  $id (${secs}s, $calls upstream requests$info)")
        echo "PASS  $id (${secs}s, $calls upstream requests$info)"
    else
        failed=$((failed + 1))
        local msg
        msg=$(printf '%s; ' "${problems[@]}")
        results+=("FAIL  $id: ${msg%; }")
        echo "FAIL  $id (${secs}s, $calls upstream requests): ${msg%; }"
        [ -f "$d/check.txt" ] && grep -v '^  check:' "$d/check.txt" | head -n 8
        [ -f "$d/check.txt" ] && grep '^  check:' "$d/check.txt"
        echo "  client stderr: $(tail -n 4 "$d/client.err" 2>/dev/null | tr '\n' ' ' | cut -c1-600)"
        echo "  client stdout: $(tail -n 4 "$d/client.out" 2>/dev/null | tr '\n' ' ' | cut -c1-600)"
    fi
}

echo "-- runs (clients: $clients; modes: $modes; scenarios: $scenarios${budget:+; fit budget: $budget})"
for scenario in ${scenarios//,/ }; do
    for mode in ${modes//,/ }; do
        for client in ${clients//,/ }; do
            run_one "$client" "$mode" "$scenario"
        done
    done
done

echo "-- summary"
printf '%s\n' "${results[@]}" | tee "$work/results.txt"
echo "$(( ${#results[@]} - failed )) passed, $failed failed"
echo "-- figures (figures.json of each run; tests/clients/figures.py)"
"$python" "$here/figures.py" summary "$work" | tee "$work/figures.txt" || true
[ "$failed" -eq 0 ]
