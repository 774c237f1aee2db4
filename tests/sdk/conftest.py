"""Fixtures: the mock upstream and `loom serve` (started by run.sh, or here when run alone), and
SDK clients pointed at Loom.

run.sh exports LOOM_SDK_MOCK_URL and LOOM_SDK_LOOM_URL for the servers it started; without them
(`pytest tests/sdk` by hand) the servers are started here on free ports with a fresh database.
Tests that need a server of their own (keys, crash) start it through `loomtest`.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import anthropic
import openai
import pytest

import loomtest

# Bounds every SDK call: a hung proxy fails the test, it does not hang the run.
SDK_TIMEOUT = 30.0


@pytest.fixture(scope="session")
def workdir():
    given = os.environ.get("LOOM_SDK_WORK")
    if given:
        path = Path(given)
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="loom-sdk-") as d:
        yield Path(d)


@pytest.fixture(scope="session")
def mock_url(workdir):
    given = os.environ.get("LOOM_SDK_MOCK_URL")
    if given:
        yield given
        return
    server = loomtest.start_mock(workdir)
    yield server.url
    server.stop()


@pytest.fixture(scope="session")
def loom_url(workdir, mock_url):
    given = os.environ.get("LOOM_SDK_LOOM_URL")
    if given:
        yield given
        return
    server = loomtest.start_loom(workdir, workdir / "main.db", mock_url)
    yield server.url
    server.stop()


@pytest.fixture
def mock(mock_url):
    """The mock's control API, with its record and fault queue emptied for this test."""
    control = loomtest.MockControl(mock_url)
    control.clear()
    control.default_fault(None)
    yield control
    control.default_fault(None)
    control.clear()


@pytest.fixture
def loom(loom_url):
    return loomtest.LoomApi(loom_url)


# The client's own key: under `--auth none` it goes upstream as it came.
CLIENT_OPENAI_KEY = "sk-client-openai-test"
CLIENT_ANTHROPIC_KEY = "sk-ant-client-test"


@pytest.fixture
def oai(loom_url):
    return openai.OpenAI(base_url=f"{loom_url}/v1", api_key=CLIENT_OPENAI_KEY,
                         max_retries=0, timeout=SDK_TIMEOUT)


@pytest.fixture
def ant(loom_url):
    return anthropic.Anthropic(base_url=loom_url, api_key=CLIENT_ANTHROPIC_KEY,
                               max_retries=0, timeout=SDK_TIMEOUT)
