"""The crash test: a storm of concurrent SDK clients, `loom serve` killed with SIGKILL in the middle
of it and restarted on the same database.

Afterwards, for every client: every reply it had fully received before the kill is in its
session's log, exactly as received (the log's opening equals the client's history up to that
point); its conversation, finished after the restart (calls cut off by the kill are retried),
is in the log exactly once, in order, in the session Loom's last reply named; every call it
received has its receipt and usage; and every session of the database renders without an
orphaned tool call or result, in every provider format.
"""

from __future__ import annotations

import threading
import time
import traceback

import anthropic
import openai

import loomtest
from convo import (
    ChatDriver,
    MessagesDriver,
    ResponsesDriver,
    anthropic_orphans,
    chat_orphans,
    check_usage,
    log_mismatch,
)
from loomtest import LoomApi, new_id

CLIENTS = 16
EXCHANGES = 20  # model calls per client
KILL_AFTER = CLIENTS * EXCHANGES * 2 // 5  # calls completed storm-wide before the kill
ATTEMPTS = 5  # per call, counting the first
STORM_TIMEOUT = 180.0
RESTART_TIMEOUT = 60.0
SDK_TIMEOUT = 30.0

# Which API and delivery each client uses, by its number.
KINDS = [
    (ChatDriver, {"stream": False}),
    (ChatDriver, {"stream": True}),
    (MessagesDriver, {"stream": False}),
    (MessagesDriver, {"stream": True}),
    (MessagesDriver, {"stream": True, "helper": True, "thinking": True}),
    (ResponsesDriver, {"stream": True}),
    (ResponsesDriver, {"stream": False}),
    (ChatDriver, {"stream": True, "mode": "observe"}),
]


class Storm:
    """What the clients share: where Loom is, and whether it has been killed."""

    def __init__(self, url: str):
        self.lock = threading.Lock()
        self.url = url
        self.killed = False
        self.completed = 0
        self.cut_off = 0
        self.restarted = threading.Event()
        self.progress = threading.Condition(self.lock)

    def client_for(self, make):
        url = self.url
        if make is MessagesDriver:
            return anthropic.Anthropic(base_url=url, api_key="sk-ant-storm", max_retries=0, timeout=SDK_TIMEOUT)
        return openai.OpenAI(base_url=f"{url}/v1", api_key="sk-storm", max_retries=0, timeout=SDK_TIMEOUT)


class Client:
    """One client of the storm: its own session, its own conversation."""

    def __init__(self, storm: Storm, n: int):
        self.storm = storm
        self.n = n
        self.make, kw = KINDS[n % len(KINDS)]
        self.driver = self.make(storm.client_for(self.make), new_id(f"storm{n}"), **kw)
        # How many expected events the log must hold, from what was received before the kill.
        self.acked = len(self.driver.expected)
        self.error: str | None = None
        self.retries = 0

    def run(self) -> None:
        try:
            for k in range(EXCHANGES):
                if k % 2 == 0:
                    self.driver.say(f"client {self.n} exchange {k}: look up item {k} in the index")
                else:
                    self.driver.answer_tools()
                self.exchange()
        except Exception:  # noqa: BLE001 (reported by the test)
            self.error = traceback.format_exc()

    def exchange(self) -> None:
        for attempt in range(ATTEMPTS):
            try:
                self.driver.call()
            except Exception as e:  # noqa: BLE001 (any failure of a cut-off call)
                with self.storm.lock:
                    killed = self.storm.killed
                if not killed:
                    raise
                self.retries += 1
                if attempt == 0:
                    with self.storm.lock:
                        self.storm.cut_off += 1
                if not self.storm.restarted.wait(RESTART_TIMEOUT):
                    raise RuntimeError("loom serve was not restarted in time") from e
                self.driver.client = self.storm.client_for(self.make)
                time.sleep(0.05 * attempt)
                continue
            with self.storm.lock:
                if not self.storm.killed:
                    self.acked = len(self.driver.expected)
                self.storm.completed += 1
                self.storm.progress.notify_all()
            return
        raise RuntimeError(f"client {self.n}: a call failed {ATTEMPTS} times")


def test_sigkill_mid_storm_loses_no_acknowledged_turn(workdir):
    db = workdir / f"{new_id('crash')}.db"
    mock = loomtest.start_mock(workdir, name="mock-crash")
    servers = []
    try:
        # Slow, fragmented bodies, so the kill lands in the middle of replies.
        loomtest.MockControl(mock.url).default_fault({"chunk_bytes": 48, "chunk_delay_ms": 2})
        loom = loomtest.start_loom(workdir, db, mock.url, name="loom-crash-1")
        servers.append(loom)
        storm = Storm(loom.url)
        clients = [Client(storm, n) for n in range(CLIENTS)]
        threads = [threading.Thread(target=c.run, daemon=True) for c in clients]
        for t in threads:
            t.start()

        with storm.lock:
            deadline = time.monotonic() + STORM_TIMEOUT
            while storm.completed < KILL_AFTER and time.monotonic() < deadline:
                if not any(t.is_alive() for t in threads):
                    break
                storm.progress.wait(timeout=1.0)
            assert storm.completed >= KILL_AFTER, (
                f"only {storm.completed} calls completed before the kill; errors: "
                + "; ".join(c.error for c in clients if c.error)
            )
            storm.killed = True
            loom.kill()
            completed_at_kill = storm.completed
        assert completed_at_kill < CLIENTS * EXCHANGES, "the storm was over before the kill"

        restarted = loomtest.start_loom(workdir, db, mock.url, name="loom-crash-2")
        servers.append(restarted)
        with storm.lock:
            storm.url = restarted.url
        storm.restarted.set()

        deadline = time.monotonic() + STORM_TIMEOUT
        for t in threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        assert not any(t.is_alive() for t in threads), "clients still running after the storm's time"
        errors = [f"client {c.n}:\n{c.error}" for c in clients if c.error]
        assert not errors, "\n".join(errors)
        forks = sum(1 for c in clients if c.driver.calls[-1].session != c.driver.session)
        print(f"\ncrash test: {completed_at_kill} calls before the kill, {storm.cut_off} clients cut off, "
              f"{forks} finished in a fork")

        api = LoomApi(restarted.url)
        for c in clients:
            d = c.driver
            base = api.events(d.session)
            # Everything received before the kill survived it, in the session it was sent to.
            mismatch = log_mismatch(d.expected[: c.acked], base[: c.acked])
            assert mismatch is None, f"client {c.n} ({d.api}), session {d.session}: {mismatch}"
            # The whole conversation is in the session Loom last named, once and in order.
            final = d.calls[-1].session
            mismatch = log_mismatch(d.expected, api.events(final))
            assert mismatch is None, f"client {c.n} ({d.api}), session {final}: {mismatch}"
            # Every call the client received has its receipt with the usage it saw.
            receipts = {}
            for call in d.calls:
                if call.session not in receipts:
                    receipts[call.session] = {r["id"]: r for r in api.receipts(call.session)}
                got = receipts[call.session].get(call.call_id)
                assert got is not None, f"client {c.n}: no receipt for call {call.call_id} in {call.session}"
                check_usage(got, call)

        sessions = api.sessions()
        assert len(sessions) >= CLIENTS
        for s in sessions:
            for model, fmt, orphans in (
                ("gpt-4o", "openai-chat", lambda b: chat_orphans(b["messages"])),
                ("claude-sonnet-4-5", "anthropic", lambda b: anthropic_orphans(b["messages"])),
            ):
                r = api.render(s["id"], model, fmt)
                assert r.status == 200, f"render {s['id']} as {fmt}: {r.status} {r.body}"
                problems = orphans(r.body["body"])
                assert not problems, f"render {s['id']} as {fmt}: {problems}"
        assert restarted.stop() == 0, f"the restarted server did not stop cleanly; see {restarted.log}"
    finally:
        for server in servers:
            if server.proc.poll() is None:
                server.kill()
        mock.stop()
