#!/usr/bin/env bash
# Builds the Python package `loom` into a wheel, installs it into a fresh virtualenv with the
# test dependencies from PyPI (tests/requirements.txt), and runs pytest on tests/. Exits non-zero
# when a test fails, and when pytest finds no tests (its exit code 5).
#
# Environment: PYTHON (default python3), LOOM_PY_VENV (default target/py-venv), CARGO_TARGET_DIR;
# pytest arguments after the script's name (`bash crates/loom-py/run_tests.sh -k render`).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
venv=${LOOM_PY_VENV:-$target/py-venv}
python=${PYTHON:-python3}
requirements=$here/tests/requirements.txt

echo "-- python environment ($venv)"
if ! cmp -s "$requirements" "$venv/.loom-requirements"; then
    rm -rf "$venv"
    if ! "$python" -m venv "$venv"; then
        echo "error: $python cannot make a virtualenv (on Debian: apt-get install python3-venv)" >&2
        exit 1
    fi
    timeout 600 "$venv/bin/python" -m pip install --disable-pip-version-check -q -r "$requirements"
    cp "$requirements" "$venv/.loom-requirements"
fi

echo "-- building the wheel (maturin, release)"
wheels=$target/wheels
rm -f "$wheels"/loom_context-*.whl
(cd "$here" && timeout 3600 "$venv/bin/maturin" build --release --out "$wheels")
wheel=$(ls "$wheels"/loom_context-*.whl | head -n 1)
timeout 300 "$venv/bin/python" -m pip install --disable-pip-version-check -q --force-reinstall --no-deps "$wheel"
"$venv/bin/python" -c 'import loom; print("loom", loom.__version__, "from", loom.__file__)'

echo "-- building loom and the mock provider (release), which the tests start"
(cd "$root" && timeout 3600 cargo build --release -p loom-cli --bin loom -p loom-mock-upstream --bin loom-mock-upstream)
export LOOM_BIN=${LOOM_BIN:-$target/release/loom}
export LOOM_MOCK_BIN=${LOOM_MOCK_BIN:-$target/release/loom-mock-upstream}

echo "-- pytest"
cd "$here"
set +e
timeout 1800 "$venv/bin/python" -m pytest -q tests "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
    echo "error: pytest collected no tests" >&2
    exit 1
fi
exit "$status"
