"""`fit` mode with a small X-Loom-Budget: a long conversation stays within budget, and what the
model receives only grows at its end between compaction points (so its prompt cache holds)."""

import json

import pytest

from convo import ChatDriver, MessagesDriver, ResponsesDriver, check_session
from loomtest import new_id

BUDGET = 1500
TURNS = 12

PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}


def long_output(name: str, call_id: str, args: object) -> str:
    """A tool output of a few hundred tokens, different for every call."""
    lines = [f"{name} {call_id} line {i}: value={i * 7919 % 1000} path=src/mod_{i}.rs ok" for i in range(24)]
    return "\n".join(lines)


@pytest.mark.parametrize(
    "make,client",
    [(ChatDriver, "oai"), (ResponsesDriver, "oai"), (MessagesDriver, "ant")],
    ids=["chat", "responses", "messages"],
)
def test_long_conversation_stays_within_budget(request, loom, mock, make, client):
    d = make(request.getfixturevalue(client), new_id(f"fit-{make.api}"), mode="fit", budget=BUDGET)
    for i in range(TURNS):
        d.turn(f"step {i}: look up item number {i} in the index", output=long_output)
    receipts = check_session(loom, d, "fit")
    for c, r in zip(d.calls, receipts):
        receipt = r["receipt"]
        assert receipt is not None, f"call {c.call_id} has no render receipt"
        assert receipt["estimate"] <= BUDGET, f"call {c.call_id}: estimate {receipt['estimate']} > {BUDGET}"
    points = [i for i, r in enumerate(receipts) if r["receipt"].get("compaction")]
    assert points, "the conversation outgrew the budget but no compaction point fired"
    sent = mock.requests(PATHS[make.api])
    assert len(sent) == len(d.calls)
    convs = [make.conversation(r["body"]) for r in sent]
    for i in range(1, len(convs)):
        if i in points:
            continue
        before, after = convs[i - 1], convs[i]
        assert after[: len(before)] == before, (
            f"request {i + 1} (call {d.calls[i].call_id}) does not extend request {i} and its receipt "
            f"records no compaction"
        )
    # Loom really cut: the last request is much smaller than the history the client sent.
    history = {"chat": lambda: d.messages, "responses": lambda: d.input, "messages": lambda: d.messages}
    assert len(json.dumps(convs[-1])) < len(json.dumps(history[make.api]())) // 2
