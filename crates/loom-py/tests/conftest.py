"""Fixtures: a database embedded (the engine in-process) and served (the same interface over a
real `loom serve` process on a free loopback port, `loom.connect`)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import time

import pytest

import loom

ROOT = pathlib.Path(__file__).resolve().parents[3]


def binary(variable: str, name: str, package: str) -> pathlib.Path:
    """The binary `name`: `$variable`, or the workspace's release build (run_tests.sh builds it)."""
    path = pathlib.Path(os.environ.get(variable, ROOT / "target" / "release" / name))
    if not path.exists():
        pytest.fail(f"no {name} at {path}: build it (cargo build --release -p {package}) or set {variable}")
    return path


def loom_binary() -> pathlib.Path:
    return binary("LOOM_BIN", "loom", "loom-cli")


class Process:
    """A process a test started, stopped with it (TERM, then KILL after 10 s)."""

    proc: subprocess.Popen

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Served(Process):
    """A `loom serve` process over a fresh SQLite file, stopped when the test ends."""

    def __init__(self, tmp: pathlib.Path) -> None:
        self.proc = subprocess.Popen(
            [str(loom_binary()), "serve", "--db", str(tmp / "served.db"), "--listen", "127.0.0.1:0",
             "--upstream-openai", "http://127.0.0.1:9/v1", "--upstream-anthropic", "http://127.0.0.1:9"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        deadline = time.monotonic() + 30
        line = ""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith("listening on ") or not line:
                break
        if not line.startswith("listening on "):
            self.stop()
            pytest.fail(f"loom serve did not start: {line!r}")
        self.url = line.split()[-1]



@pytest.fixture(params=["embedded", "served"])
def db(request, tmp_path):
    if request.param == "embedded":
        yield loom.open(str(tmp_path / "loom.db"))
        return
    server = Served(tmp_path)
    try:
        yield loom.connect(server.url)
    finally:
        server.stop()


@pytest.fixture()
def embedded(tmp_path):
    return loom.open(str(tmp_path / "loom.db"))


def mock_binary() -> pathlib.Path:
    return binary("LOOM_MOCK_BIN", "loom-mock-upstream", "loom-mock-upstream")


class Mock(Process):
    """The mock provider (OpenAI Chat and Responses, Anthropic Messages) on a free port."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [str(mock_binary()), "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        line = self.proc.stdout.readline()
        if not line.startswith("listening on "):
            self.proc.kill()
            pytest.fail(f"the mock did not start: {line!r}")
        self.url = line.split()[-1]

    def requests(self) -> list:
        import json
        import urllib.request

        with urllib.request.urlopen(self.url + "/_mock/requests", timeout=10) as r:
            return json.loads(r.read())

    def bodies(self, path: str) -> list:
        import json

        return [r["body"] if isinstance(r["body"], dict) else json.loads(r["body"])
                for r in self.requests() if r["path"] == path]



@pytest.fixture()
def mock():
    m = Mock()
    try:
        yield m
    finally:
        m.stop()
