"""`loom_recall` through `loom serve`, with the official SDKs, streamed and not: once a `fit`
render leaves something out, the forwarded request offers the tool; when the model calls it, Loom
answers it with the original and asks again, and the client gets only the final reply; the log and
the receipt record the recall, and the next request extends the session."""

import pytest

from convo import ChatDriver, MessagesDriver, ResponsesDriver, text_of
from loomtest import new_id

BUDGET = 2000
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}


def long_output(name: str, call_id: str, args: object) -> str:
    """A tool output of a few hundred tokens, different for every call."""
    return "\n".join(
        f"{name} {call_id} line {i}: value={i * 7919 % 1000} path=src/mod_{i}.rs ok" for i in range(40)
    )


def tool_names(api: str, body: dict) -> list[str]:
    tools = body.get("tools", [])
    if api == "chat":
        return [t["function"]["name"] for t in tools]
    return [t.get("name") for t in tools]


def last_answer(api: str, body: dict) -> str:
    """The text of the last tool result in a request the upstream received."""
    if api == "chat":
        results = [m for m in body["messages"] if m.get("role") == "tool"]
        return text_of(results[-1]["content"])
    if api == "responses":
        results = [i for i in body["input"] if i.get("type") == "function_call_output"]
        return text_of(results[-1]["output"])
    blocks = [b for m in body["messages"] if isinstance(m.get("content"), list)
              for b in m["content"] if b.get("type") == "tool_result"]
    return text_of(blocks[-1]["content"])


CASES = [
    (ChatDriver, {}, False), (ChatDriver, {}, True),
    (ResponsesDriver, {}, False), (ResponsesDriver, {}, True),
    (MessagesDriver, {}, False), (MessagesDriver, {}, True), (MessagesDriver, {"helper": True}, True),
]


@pytest.mark.parametrize(
    "make,extra,stream", CASES,
    ids=["chat", "chat-stream", "responses", "responses-stream", "messages", "messages-stream",
         "messages-stream-helper"],
)
def test_the_model_recalls_and_the_client_sees_only_the_final_reply(request, loom, mock, make, extra,
                                                                  stream):
    client = request.getfixturevalue("ant" if make is MessagesDriver else "oai")
    session = new_id(f"recall-{make.api}")
    d = make(client, session, mode="fit", budget=BUDGET, stream=stream, **extra)
    path = PATHS[make.api]
    for i in range(12):
        d.turn(f"step {i}: look up item number {i} in the index", output=long_output)
        sent = mock.requests(path)[-1]["body"]
        if "loom_recall ref=" in str(sent):
            break
    else:
        pytest.fail("twelve turns over the budget and no stub says how to recall")
    assert tool_names(make.api, sent)[-1] == "loom_recall", "offered once something is left out"
    outputs = [e["text"] for e in d.expected if e["kind"] == "tool_result"]

    before = len(mock.requests(path))
    d.say("recall that output, please")
    c = d.call()
    assert not d.pending, f"the client got calls: {c.calls}"
    assert c.text.startswith("Let me read that again. "), c.text
    assert c.text != "Let me read that again. ", "the final reply follows the text before the call"
    assert c.session == session and c.diverged is None

    asked = mock.requests(path)[before:]
    assert len(asked) == 2, "the upstream was asked twice: the call, and again with its answer"
    assert asked[1]["body"].get("stream", False) == stream
    assert tool_names(make.api, asked[1]["body"])[-1] == "loom_recall"
    answer = last_answer(make.api, asked[1]["body"])
    shown = answer.split("\n[loom_recall: lines ")[0]
    assert any(o.startswith(shown) or shown in o for o in outputs) or any(
        o.splitlines()[0] in answer for o in outputs
    ), f"the answer holds an original: {answer[:300]}"

    events = loom.events(session)
    assert any(e["kind"] == "hidden" for e in events), "the hidden exchange is in the log"
    receipts = loom.receipts(session)
    recalls = receipts[-1]["receipt"].get("recalls")
    assert recalls and recalls[0]["found"] and recalls[0]["tokens"] > 0, receipts[-1]["receipt"]

    # The conversation goes on: the client's history (without the hidden exchange) extends the
    # session, and what the model receives extends what it received, between compaction points.
    before = len(mock.requests(path))
    d.turn("thanks, go on with the next step", output=long_output)
    assert d.calls[-1].diverged is None and d.calls[-1].session == session
    after = mock.requests(path)
    convs = [make.conversation(r["body"]) for r in [asked[1], *after[before:]]]
    points = [r["receipt"].get("compaction") for r in loom.receipts(session)[-len(convs):]]
    for i in range(1, len(convs)):
        if points[i]:
            continue
        assert convs[i][: len(convs[i - 1])] == convs[i - 1], f"request {i} does not extend {i - 1}"
