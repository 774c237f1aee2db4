"""Shared pieces of the SDK tests: processes, plain HTTP, the mock's control API, Loom's HTTP API.

Everything here is bounded: every process start, request and wait has a timeout, so a server
that hangs fails a test instead of hanging the run. Processes started here die with the Python
process that started them (PR_SET_PDEATHSIG), so a killed test run leaves nothing behind.
"""

from __future__ import annotations

import ctypes
import json
import os
import queue
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
LOOM_BIN = Path(os.environ.get("LOOM_BIN", TARGET / "release" / "loom"))
MOCK_BIN = Path(os.environ.get("LOOM_MOCK_BIN", TARGET / "release" / "loom-mock-upstream"))

# How long a server may take to print its address, and a plain request to answer.
START_TIMEOUT = 30.0
HTTP_TIMEOUT = 30.0

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Runs in the child before exec: SIGKILL it when the test process goes away."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


def new_id(prefix: str) -> str:
    """A session id no other test (or earlier run on the same database) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


class Server:
    """A server process that announces itself with one `listening on http://ADDR` line."""

    def __init__(self, name: str, argv: list[str], logdir: Path, env: dict | None = None):
        self.name = name
        self.argv = argv
        self.log = logdir / f"{name}.log"
        full_env = dict(os.environ)
        full_env.update(env or {})
        logfile = open(self.log, "ab")  # noqa: SIM115 (closed in stop)
        self._logfile = logfile
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=logfile,
            env=full_env,
            preexec_fn=_die_with_parent,
        )
        self.url = self._read_address()

    def _read_address(self) -> str:
        lines: queue.Queue = queue.Queue()

        def read() -> None:
            assert self.proc.stdout is not None
            for raw in self.proc.stdout:
                lines.put(raw.decode("utf-8", "replace").rstrip("\n"))
            lines.put(None)

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise RuntimeError(f"{self.name}: no address within {START_TIMEOUT}s; see {self.log}")
            try:
                line = lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                code = self.proc.wait(timeout=5)
                raise RuntimeError(
                    f"{self.name} exited ({code}) before listening: {self.log.read_text(errors='replace')[-2000:]}"
                )
            prefix = "listening on "
            if line.startswith(prefix):
                return line[len(prefix):].strip()
            raise RuntimeError(f"{self.name}: unexpected first line on stdout: {line!r}")

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        self._logfile.close()

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM, then SIGKILL if it has not stopped in time; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._logfile.close()
        return self.proc.returncode


def start_mock(logdir: Path, name: str = "mock") -> Server:
    return Server(name, [str(MOCK_BIN), "--listen", "127.0.0.1:0"], logdir)


def start_loom(
    logdir: Path,
    db: Path,
    mock_url: str,
    name: str = "loom",
    auth: str = "none",
    env: dict | None = None,
    listen: str = "127.0.0.1:0",
) -> Server:
    argv = [
        str(LOOM_BIN),
        "serve",
        "--db",
        str(db),
        "--listen",
        listen,
        "--upstream-openai",
        f"{mock_url}/v1",
        "--upstream-anthropic",
        mock_url,
        "--auth",
        auth,
    ]
    return Server(name, argv, logdir, env)


def create_key(db: Path, tenant: str) -> str:
    """`loom keys create`: the new key is the last line on stdout."""
    out = subprocess.run(
        [str(LOOM_BIN), "keys", "create", "--tenant", tenant, "--db", str(db)],
        capture_output=True,
        timeout=60,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"loom keys create --tenant {tenant}: {out.stderr.decode(errors='replace')}")
    lines = [l.strip() for l in out.stdout.decode().splitlines() if l.strip()]
    if not lines:
        raise RuntimeError(f"loom keys create --tenant {tenant} printed no key")
    return lines[-1]


@dataclass
class Reply:
    """A plain HTTP answer."""

    status: int
    headers: dict
    body: object  # parsed JSON, or the text when it is not JSON

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


def http(method: str, url: str, body: object = None, headers: dict | None = None,
         raw: bytes | None = None, timeout: float = HTTP_TIMEOUT) -> Reply:
    """One request with the standard library; HTTP errors are answers, not exceptions."""
    data = raw
    hdrs = dict(headers or {})
    if body is not None:
        data = json.dumps(body).encode()
        hdrs.setdefault("content-type", "application/json")
    req = urllib.request.Request(url, data=data, method=method, headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, got, payload = resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as e:
        status, got, payload = e.code, e.headers, e.read()
    text = payload.decode("utf-8", "replace")
    try:
        parsed: object = json.loads(text) if text else None
    except json.JSONDecodeError:
        parsed = text
    return Reply(status, {k.lower(): v for k, v in got.items()}, parsed)


class MockControl:
    """The mock upstream's control API."""

    def __init__(self, url: str):
        self.url = url

    def requests(self, path: str | None = None) -> list[dict]:
        r = http("GET", f"{self.url}/_mock/requests")
        assert r.status == 200, r
        got = r.body if isinstance(r.body, list) else []
        return [q for q in got if path is None or q.get("path") == path]

    def clear(self) -> None:
        assert http("DELETE", f"{self.url}/_mock/requests").status < 300
        http("DELETE", f"{self.url}/_mock/faults")

    def fault(self, **fault) -> None:
        r = http("POST", f"{self.url}/_mock/faults", body=fault)
        assert r.status < 300, r

    def default_fault(self, fault: dict | None) -> None:
        r = http("POST", f"{self.url}/_mock/default_fault", raw=json.dumps(fault).encode(),
                 headers={"content-type": "application/json"})
        assert r.status < 300, r


def header_of(recorded: dict, name: str) -> str | None:
    """A header of a request the mock recorded (a list of [name, value] pairs)."""
    for pair in recorded.get("headers", []):
        if pair[0].lower() == name.lower():
            return pair[1]
    return None


class LoomApi:
    """Loom's HTTP API, as one caller (a Loom key under `--auth keys`, or none)."""

    def __init__(self, url: str, key: str | None = None):
        self.url = url
        self.headers = {"authorization": f"Bearer {key}"} if key else {}

    def get(self, path: str) -> Reply:
        return http("GET", f"{self.url}{path}", headers=self.headers)

    def post(self, path: str, body: object) -> Reply:
        return http("POST", f"{self.url}{path}", body=body, headers=self.headers)

    def events(self, session: str) -> list[dict]:
        r = self.get(f"/loom/v1/sessions/{session}/events")
        assert r.status == 200, f"events of {session}: {r.status} {r.body}"
        return r.body["events"]

    def receipts(self, session: str) -> list[dict]:
        r = self.get(f"/loom/v1/sessions/{session}/receipts")
        assert r.status == 200, f"receipts of {session}: {r.status} {r.body}"
        return r.body["receipts"]

    def sessions(self) -> list[dict]:
        r = self.get("/loom/v1/sessions")
        assert r.status == 200, r
        return r.body["sessions"]

    def render(self, session: str, model: str, fmt: str, budget: int | None = None) -> Reply:
        body: dict = {"model": model, "format": fmt}
        if budget is not None:
            body["budget"] = budget
        return self.post(f"/loom/v1/sessions/{session}/render", body)


def wait_until(what: str, check, timeout: float = 10.0, every: float = 0.05):
    """Polls `check` until it returns something true, or fails naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)
