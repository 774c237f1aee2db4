#!/usr/bin/env bash
# Token-counting throughput, Python tiktoken and Loom in one run on the same text (every message
# content and tool-call argument of ../shared/traces, counted piece by piece, one thread).
# Prints wall-clock and per-thread CPU-time MB/s for each; then the criterion bench (wall clock).
# Figures go to docs/performance.md (Tokens).
# Needs once: python3 -m venv .venv && .venv/bin/pip install tiktoken
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fetch >/dev/null
echo "== Python tiktoken"
.venv/bin/python scripts/tiktoken_fixture.py bench
echo "== Rust"
cargo run -q --release -p loom-tokens --features compare-tiktoken-rs --example throughput
if [ "${CRITERION:-1}" = 1 ]; then
  echo "== criterion"
  cargo bench -p loom-tokens --bench tokens --features compare-tiktoken-rs -- --noplot 2>&1 \
    | grep -E '^count_traces|thrpt:|pieces'
fi
