#!/usr/bin/env bash
# Installs the real agent CLIs the client suite drives, at pinned versions, into a cache folder
# (default target/clients, ignored by git). Idempotent: a client whose installed version matches
# the pin is left as it is. Every step is bounded with `timeout`.
#
#   npm:  @anthropic-ai/claude-code (Claude Code), @openai/codex (Codex CLI), opencode-ai (opencode),
#         @qwen-code/qwen-code (qwen-code), @google/gemini-cli (Gemini CLI; not in the default list
#         until Loom speaks Gemini: LOOM_CLIENTS_ONLY=gemini)
#   PyPI: aider-chat (aider), mini-swe-agent (mini-swe-agent), each in a venv of its own because
#         they pin different litellm versions.
#
# Environment: LOOM_CLIENTS_DIR (default target/clients), PYTHON (an interpreter 3.10..3.12 for
# aider; default: python3.11 when found, else python3), LOOM_CLIENTS_ONLY="claude codex ..." to
# install a subset. Prints one line per client: `NAME VERSION PATH`.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
dir=${LOOM_CLIENTS_DIR:-$root/target/clients}

# Pins. Update these together with the fixtures (tests/clients/fixtures) they produced.
CLAUDE_CODE_VERSION=2.1.332
CODEX_VERSION=0.171.0
OPENCODE_VERSION=1.18.33
AIDER_VERSION=0.86.2        # Requires-Python >=3.10,<3.13
MINI_SWE_AGENT_VERSION=2.4.6
QWEN_CODE_VERSION=0.24.4
GEMINI_CLI_VERSION=0.61.0

npm_timeout=900
pip_timeout=900
probe_timeout=60

only=${LOOM_CLIENTS_ONLY:-claude codex opencode aider mini qwen}
wanted() { case " $only " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

if [ -z "${PYTHON:-}" ]; then
    if command -v python3.11 >/dev/null 2>&1; then PYTHON=python3.11; else PYTHON=python3; fi
fi

mkdir -p "$dir"

# Node.js and npm for the npm clients: the machine's own, or Debian's when it has none.
if ! command -v npm >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "no npm: installing Debian's nodejs and npm" >&2
        timeout 600 apt-get update -qq
        DEBIAN_FRONTEND=noninteractive timeout "$npm_timeout" apt-get install -y -qq nodejs npm >/dev/null
    else
        echo "npm is needed for Claude Code, Codex, opencode, qwen-code and Gemini CLI; install Node.js (>= 20)" >&2
        exit 1
    fi
fi

# npm_install NAME PACKAGE VERSION BIN: installs PACKAGE@VERSION into $dir/npm/NAME (a prefix of
# its own, so that one client's dependencies never move another's).
npm_install() {
    local name=$1 pkg=$2 version=$3 bin=$4
    local prefix=$dir/npm/$name
    local stamp=$prefix/.loom-version
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$pkg@$version" ] && [ -x "$prefix/node_modules/.bin/$bin" ]; then
        return 0
    fi
    echo "installing $pkg@$version into $prefix" >&2
    rm -rf "$prefix"
    mkdir -p "$prefix"
    echo '{"name":"loom-client-'"$name"'","private":true}' >"$prefix/package.json"
    timeout "$npm_timeout" npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error \
        --save-exact "$pkg@$version" >&2
    echo "$pkg@$version" >"$stamp"
}

# venv_install NAME REQUIREMENT: a venv of its own in $dir/venv/NAME with REQUIREMENT installed.
venv_install() {
    local name=$1 req=$2
    local venv=$dir/venv/$name
    local stamp=$venv/.loom-version
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$req" ] && [ -x "$venv/bin/python" ]; then
        return 0
    fi
    echo "installing $req into $venv ($PYTHON)" >&2
    rm -rf "$venv"
    timeout "$probe_timeout" "$PYTHON" -m venv "$venv"
    timeout "$pip_timeout" "$venv/bin/python" -m pip install --disable-pip-version-check -q \
        --upgrade pip >&2 || true
    timeout "$pip_timeout" "$venv/bin/python" -m pip install --disable-pip-version-check -q "$req" >&2
    echo "$req" >"$stamp"
}

report() {
    local name=$1 version=$2 path=$3
    printf '%-9s %-12s %s\n' "$name" "$version" "$path"
}

if wanted claude; then
    npm_install claude @anthropic-ai/claude-code "$CLAUDE_CODE_VERSION" claude
    v=$(timeout "$probe_timeout" "$dir/npm/claude/node_modules/.bin/claude" --version 2>/dev/null | head -n1 || true)
    report claude "${v%% *}" "$dir/npm/claude/node_modules/.bin/claude"
fi
if wanted codex; then
    npm_install codex @openai/codex "$CODEX_VERSION" codex
    v=$(timeout "$probe_timeout" "$dir/npm/codex/node_modules/.bin/codex" --version 2>/dev/null | head -n1 || true)
    report codex "${v##* }" "$dir/npm/codex/node_modules/.bin/codex"
fi
if wanted opencode; then
    npm_install opencode opencode-ai "$OPENCODE_VERSION" opencode
    v=$(HOME=$dir/home-probe timeout "$probe_timeout" "$dir/npm/opencode/node_modules/.bin/opencode" --version 2>/dev/null | head -n1 || true)
    report opencode "$v" "$dir/npm/opencode/node_modules/.bin/opencode"
fi
if wanted aider; then
    venv_install aider "aider-chat==$AIDER_VERSION"
    v=$(timeout "$probe_timeout" "$dir/venv/aider/bin/python" -c 'import aider; print(aider.__version__)' 2>/dev/null || true)
    report aider "$v" "$dir/venv/aider/bin/aider"
fi
if wanted mini; then
    venv_install mini "mini-swe-agent==$MINI_SWE_AGENT_VERSION"
    v=$(MSWEA_GLOBAL_CONFIG_DIR=$dir/mini-probe MSWEA_SILENT_STARTUP=1 timeout "$probe_timeout" "$dir/venv/mini/bin/python" -c "import minisweagent; print(minisweagent.__version__)" 2>/dev/null | tail -n 1 || true)
    report mini "$v" "$dir/venv/mini/bin/mini"
fi
if wanted qwen; then
    npm_install qwen @qwen-code/qwen-code "$QWEN_CODE_VERSION" qwen
    v=$(HOME=$dir/home-probe timeout "$probe_timeout" "$dir/npm/qwen/node_modules/.bin/qwen" --version 2>/dev/null | head -n1 || true)
    report qwen "$v" "$dir/npm/qwen/node_modules/.bin/qwen"
fi
if wanted gemini; then
    npm_install gemini @google/gemini-cli "$GEMINI_CLI_VERSION" gemini
    v=$(HOME=$dir/home-probe timeout "$probe_timeout" "$dir/npm/gemini/node_modules/.bin/gemini" --version 2>/dev/null | head -n1 || true)
    report gemini "$v" "$dir/npm/gemini/node_modules/.bin/gemini"
fi
