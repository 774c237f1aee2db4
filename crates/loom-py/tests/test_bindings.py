"""The Python bindings: every method of the in-process engine, bad input raising the right
exception with the record, field and reason, and nothing stored changing when one is raised."""

from __future__ import annotations

import json
import threading

import pytest

import loom

SYSTEM = {"role": "system", "content": "You are a careful agent."}


def call(id: str, name: str, args: dict) -> dict:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        ],
    }


def result(id: str, text: str) -> dict:
    return {"role": "tool", "tool_call_id": id, "content": text}


def history(steps: int, output_lines: int = 3) -> list:
    messages = [SYSTEM, {"role": "user", "content": "Fix the failing test in parser.py."}]
    for i in range(steps):
        messages.append(call(f"call_{i}", "bash", {"command": f"grep -n parse src/file_{i}.py"}))
        lines = "\n".join(f"src/file_{i}.py:{n}: def parse_{n}(x): return x" for n in range(output_lines))
        messages.append(result(f"call_{i}", lines))
    return messages


def snapshot(db: loom.Database) -> str:
    """Everything stored that a refused call could change."""
    state = []
    for info in db.sessions():
        s = db.session(info["id"])
        state.append((info, s.events(), s.model_calls()))
    return json.dumps(state, sort_keys=True)


def test_open_import_render_and_read_back(db):
    s = db.import_history(history(3), format="openai", session="run-1")
    assert s.info["event_count"] == 8
    assert [e["kind"] for e in s.events()][:3] == ["system", "user", "assistant"]
    rendered = s.render(model="gpt-4o", budget=8_000)
    assert rendered.body["model"] == "gpt-4o"
    assert rendered.body["messages"][0] == SYSTEM
    assert [m["role"] for m in rendered.body["messages"]] == [m["role"] for m in history(3)]
    assert rendered.model_call == 1
    assert rendered.receipt["model"] == "gpt-4o"
    # An unchanged log renders the same bytes and records no second call.
    again = s.render(model="gpt-4o", budget=8_000)
    assert again.body == rendered.body and again.model_call is None
    assert len(s.model_calls()) == 1


def test_every_render_format(db):
    s = db.import_history(history(2), format="openai", session="f")
    chat = s.render(model="gpt-4o", budget=8_000, format="openai-chat").body
    responses = s.render(model="gpt-4o", budget=8_000, format="openai-responses").body
    anthropic = s.render(model="claude-sonnet-4-5", budget=8_000, format="anthropic").body
    react = s.render(model="gpt-4o", budget=8_000, format="react").body
    assert "messages" in chat and "input" in responses
    assert anthropic["system"] and anthropic["messages"][0]["role"] == "user"
    assert react["prompt"].startswith("System: You are a careful agent.") or "Fix the failing test" in react["prompt"]
    with pytest.raises(loom.InvalidInput) as bad:
        s.render(model="gpt-4o", format="xml")
    assert bad.value.field == "format"


def test_a_long_history_is_fitted_and_its_outputs_recalled(db):
    s = db.import_history(history(40, output_lines=60), format="openai", session="long")
    rendered = s.render(model="gpt-4o", budget=4_000)
    assert loom.count_tokens(json.dumps(rendered.body["messages"]), model="gpt-4o") < 4_000
    assert rendered.receipt["estimate"] <= 4_000
    # Every tool result is paired with its call, however much was cut.
    calls = {c["id"] for m in rendered.body["messages"] for c in m.get("tool_calls") or []}
    results = {m["tool_call_id"] for m in rendered.body["messages"] if m["role"] == "tool"}
    assert results <= calls
    # An output the render replaced by a reference comes back whole.
    explained = s.explain(4)
    ref = explained["original"].get("ref")
    assert ref, explained
    original = s.recall(ref)
    assert original.decode().startswith("src/file_0.py:0: def parse_0")
    assert db.recall(ref, session="long") == original
    with pytest.raises(loom.NotFound):
        s.recall("outputs/none.txt")
    assert any(call["call"] == 1 for call in explained["calls"])


def test_append_and_report_usage(db):
    s = db.create_session("manual", agent="coder")
    assert s.info["agent"] == "coder"
    first, last = s.append(
        [
            {"kind": "system", "content": "be brief"},
            {"kind": "user", "content": "hello"},
        ]
    )
    assert (first, last) == (1, 2)
    rendered = s.render(model="gpt-4o")
    call = s.report_usage(rendered.model_call, input_tokens=120, cached_input_tokens=64, output_tokens=9)
    assert call["usage"]["cached_input_tokens"] == 64
    # The same figures again are accepted and change nothing; other figures are refused.
    s.report_usage(rendered.model_call, input_tokens=120, cached_input_tokens=64, output_tokens=9)
    before = snapshot(db)
    with pytest.raises(loom.Conflict) as other:
        s.report_usage(rendered.model_call, input_tokens=1)
    assert "already has a usage" in other.value.reason
    with pytest.raises(loom.NotFound):
        s.report_usage(99, input_tokens=1)
    assert snapshot(db) == before


def test_bad_input_raises_and_changes_nothing(db):
    s = db.import_history(history(1), format="openai", session="guarded")
    before = snapshot(db)
    # A result for a call the log never made: the whole batch is refused.
    ghost = {k: v for k, v in s.events()[-1].items() if k != "seq"}
    ghost["call_id"] = "ghost"
    with pytest.raises(loom.InvalidEvent) as orphan:
        s.append([{"kind": "user", "content": "fine"}, ghost])
    assert orphan.value.field == "events[1]"
    assert "seq 6" in orphan.value.record
    assert orphan.value.reason
    # Not Loom's event form at all.
    with pytest.raises(loom.InvalidInput) as shape:
        s.append([{"kind": "telepathy"}])
    assert shape.value.field == "events[0]"
    with pytest.raises(loom.InvalidInput):
        s.append([])
    # A duplicate session, an unknown session, a bad session id.
    with pytest.raises(loom.Conflict):
        db.create_session("guarded")
    with pytest.raises(loom.SessionNotFound):
        db.session("nobody").render(model="gpt-4o")
    with pytest.raises(loom.SessionNotFound):
        db.session("nobody").append([{"kind": "user", "content": "x"}])
    with pytest.raises(loom.InvalidInput) as bad_id:
        db.session("").info
    assert bad_id.value.field == "session"
    # A model the registry does not know, with no budget to fall back on.
    with pytest.raises(loom.InvalidInput) as model:
        s.render(model="no-such-model")
    assert model.value.field == "model"
    with pytest.raises(loom.InvalidInput):
        s.render(model="gpt-4o", budget=0)
    # A history that is not one: the importer says where.
    with pytest.raises(loom.InvalidInput):
        db.import_history([{"role": "wizard", "content": "x"}], session="imported")
    with pytest.raises(loom.InvalidInput):
        db.import_history(history(1), format="yaml", session="imported")
    with pytest.raises(loom.InvalidInput):
        s.explain(0)
    assert snapshot(db) == before
    # Every class is a LoomError.
    for cls in (loom.InvalidEvent, loom.InvalidInput, loom.NotFound, loom.SessionNotFound,
                loom.Conflict, loom.Unavailable, loom.StorageError):
        assert issubclass(cls, loom.LoomError)


def test_import_extends_an_existing_session(db):
    messages = history(2)
    db.import_history(messages[:4], format="openai", session="grow")
    s = db.import_history(messages, format="openai", session="grow")
    assert s.info["event_count"] == len(messages)
    # The same history again changes nothing; one that departs from the log is refused.
    db.import_history(messages, format="openai", session="grow")
    assert s.info["event_count"] == len(messages)
    before = snapshot(db)
    edited = messages[:2] + [{"role": "user", "content": "something else"}]
    with pytest.raises(loom.Conflict) as departs:
        db.import_history(edited, format="openai", session="grow")
    assert "seq 3" in str(departs.value)
    assert snapshot(db) == before


def test_a_deleted_session_is_gone_and_its_id_free(db):
    messages = history(2)
    db.import_history(messages, format="openai", session="doomed")
    db.import_history(messages, format="openai", session="kept")
    db.session("doomed").render(model="gpt-4o")  # the session is live in this handle
    out = db.delete_session("doomed")
    assert out["events"] == len(messages)
    assert [s["id"] for s in db.sessions()] == ["kept"]
    with pytest.raises(loom.SessionNotFound):
        db.delete_session("doomed")
    # The id starts a new log.
    s = db.import_history(messages[:2], format="openai", session="doomed")
    assert s.info["event_count"] == 2
    # Rendered from the new log, not from the deleted one's live state.
    sent = s.render(model="gpt-4o").body["messages"]
    assert [m["role"] for m in sent] == [m["role"] for m in messages[:2]]


def test_anthropic_and_responses_histories(db):
    a = db.import_history(
        [
            {"role": "user", "content": "list the files"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.py"}]},
        ],
        format="anthropic",
        session="claude",
        system="be brief",
    )
    assert [e["kind"] for e in a.events()] == ["system", "user", "assistant", "tool_result"]
    r = db.import_history(
        [
            {"role": "user", "content": "list the files"},
            {"type": "function_call", "call_id": "fc_1", "name": "bash", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "fc_1", "output": "a.py"},
        ],
        format="responses",
        session="resp",
    )
    assert [e["kind"] for e in r.events()][-1] == "tool_result"


def test_count_tokens_is_exact():
    assert loom.count_tokens("hello world", model="gpt-4o") == 2
    assert loom.count_tokens("", model="gpt-4o") == 0
    with pytest.raises(loom.InvalidInput):
        loom.count_tokens("x", model="no-such-model")


def test_one_database_shared_by_threads(db):
    messages = history(6)
    db.import_history(messages, format="openai", session="shared")
    errors = []

    def work(n: int) -> None:
        try:
            own = db.import_history(history(2 + n % 3), format="openai", session=f"own-{n}")
            for _ in range(5):
                own.render(model="gpt-4o", budget=4_000)
                db.session("shared").render(model="gpt-4o", budget=4_000)
        except Exception as e:  # noqa: BLE001 - collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(db.sessions()) == 9
