"""The examples in examples/python run as documented, the ones that call a model against the
mock provider."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT

EXAMPLES = ROOT / "examples" / "python"


def run(name: str, env: dict) -> str:
    out = subprocess.run([sys.executable, str(EXAMPLES / name)], env={**os.environ, **env},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"{name}:\n{out.stdout}\n{out.stderr}"
    return out.stdout


def test_embedded_example_fits_and_recalls():
    out = run("embedded.py", {})
    assert "recalled 29179 bytes; same as sent: True" in out
    assert "stubbed seqs: [{'from': 4, 'to': 4}]" in out


def test_langchain_example_trims_with_exact_counts():
    pytest.importorskip("langchain_core")
    out = run("langchain_history.py", {})
    assert "4 messages in Loom's render of the history" in out


@pytest.mark.parametrize("name", ["wrap_openai.py", "agents_session.py"])
def test_model_examples_against_the_mock(mock, name):
    pytest.importorskip("openai")
    if name == "agents_session.py":
        pytest.importorskip("agents")
    out = run(name, {"OPENAI_BASE_URL": mock.url + "/v1", "OPENAI_API_KEY": "sk-test",
                     "OPENAI_AGENTS_DISABLE_TRACING": "1"})
    assert "ok:" in out
