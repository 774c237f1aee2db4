"""Memory from Python, embedded and served: notes into a session's working memory (L2) with a
time to live, search by tier within a budget, provenance back to the log, and agent isolation."""

from __future__ import annotations

import pytest

import loom


def conversation(db, session: str, agent: str, lines):
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(lines)]
    db.import_history(messages, format="openai", session=session, agent=agent)
    return db.session(session)


def test_notes_and_tiers_with_provenance_and_budget(db):
    s = conversation(db, "trip", "friend", ["We booked the cabin at Lake Tahoe for June", "Lovely."])
    saved = s.memory_save("Ana is allergic to peanuts", ttl_seconds=3600)
    assert saved["created"] is True
    assert saved["expires_ms"] > 0
    again = s.memory_save("ana is allergic to  peanuts")
    assert again["id"] == saved["id"] and again["created"] is False

    notes = s.memory_search("peanuts allergic", tier="L2")
    assert [h["text"] for h in notes] == ["Ana is allergic to peanuts"]
    assert notes[0]["tier"] == "L2"
    assert notes[0]["sources"][0] == {"session": "trip", "seq": 2}

    long_term = s.memory_search("cabin lake", tier="L4")
    assert long_term[0]["text"].startswith("We booked the cabin")
    assert long_term[0]["sources"][0]["session"] == "trip"
    assert all(h["tier"] == "L4" for h in long_term)

    recent = s.memory_search("cabin", tier="L1")
    assert recent and recent[0]["tier"] == "L1"

    # The default view: the session's notes with long-term memory; within the budget.
    both = s.memory_search("cabin peanuts", budget=12)
    assert sum(h["tokens"] for h in both) <= 12
    tiers = {h["tier"] for h in s.memory_search("cabin peanuts")}
    assert tiers == {"L2", "L4"}


def test_memory_is_per_agent(db):
    conversation(db, "a", "alice", ["my locker code is 4471", "ok"])
    b = conversation(db, "b", "bob", ["my bike is blue", "ok"])
    db.session("a").memory_search("locker")  # indexes a
    assert b.memory_search("locker code", tier="L4") == []
    assert db.memory_search("locker code", agent="bob") == []
    assert db.memory_search("locker code", agent="alice")[0]["text"] == "my locker code is 4471"


def test_bad_memory_input_raises_naming_the_field(db):
    s = conversation(db, "x", "ops", ["hello there", "hi"])
    with pytest.raises(loom.InvalidInput) as e:
        s.memory_search("hello", tier="L9")
    assert e.value.field == "tier"
    with pytest.raises(loom.InvalidInput):
        s.memory_save("note", ttl_seconds=0)
    with pytest.raises(loom.InvalidInput):
        s.memory_save("   ")
    with pytest.raises(loom.NotFound) as e:
        s.memory_save("note", seq=99)
    assert e.value.field == "seq"
    with pytest.raises(loom.NotFound):
        db.session("nowhere").memory_save("note")


def test_a_time_range_keeps_the_memories_valid_within_it(db):
    s = conversation(db, "range", "ops", ["the standup moved to the blue room", "noted"])
    found = s.memory_search("standup room", tier="L4")
    assert found, "indexed"
    assert s.memory_search("standup room", tier="L4", from_ms=0) == found
    assert s.memory_search("standup room", tier="L4", to_ms=0) == []
    assert s.memory_search("standup room", tier="L4", from_ms=2**62) == []


def _test_model():
    import os
    from pathlib import Path

    path = os.environ.get("LOOM_TEST_MODEL") or str(
        Path(__file__).resolve().parents[3] / "target" / "models" / "all-MiniLM-L6-v2"
    )
    return path if (Path(path) / "model.safetensors").exists() else None


def test_an_embedder_finds_what_shares_no_word_and_a_bad_one_is_named():
    model = _test_model()
    if model is None:
        pytest.skip("no local test model (scripts/fetch-test-model.sh)")
    db = loom.open(":memory:", embedder=f"local:{model}")
    conversation(db, "c", "ann", ["I see the physician on Monday", "Good luck.", "The garden needs water", "Rain is due."])
    hits = db.memory_search("When is my doctor appointment?", session="c", budget=12)
    assert hits[0]["text"] == "I see the physician on Monday"
    # Without a limit the budget decides: every item fits 1,000 tokens.
    assert len(db.memory_search("physician garden water rain", session="c", tier="L4")) == 4
    with pytest.raises(loom.LoomError) as e:
        loom.open(":memory:", embedder="local:/no/such/model")
    assert "/no/such/model" in str(e.value)
