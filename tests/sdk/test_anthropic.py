"""Anthropic Messages through `loom serve` with the official `anthropic` SDK."""

import pytest

from conftest import CLIENT_ANTHROPIC_KEY
from convo import MessagesDriver, check_session
from loomtest import header_of, new_id

PATH = "/v1/messages"


@pytest.mark.parametrize(
    "stream,helper", [(False, False), (True, False), (True, True)], ids=["whole", "stream", "stream-helper"]
)
@pytest.mark.parametrize("mode", ["fit", "observe"])
def test_tool_conversation(ant, loom, mock, mode, stream, helper):
    d = MessagesDriver(ant, new_id(f"msg-{mode}"), mode=mode, stream=stream, helper=helper)
    d.turn("find where the config loader lives")
    d.turn("check both places in parallel please")
    d.turn("thanks, now summarise what you found")
    assert [len(c.calls) for c in d.calls] == [1, 0, 2, 0, 1, 0]
    assert all(c.text.startswith("ok: ") for c in d.calls if not c.calls)
    check_session(loom, d, mode)
    sent = mock.requests(PATH)
    assert len(sent) == len(d.calls)
    # Under --auth none the client's own key goes upstream, in the header the SDK put it in.
    assert {header_of(r, "x-api-key") or header_of(r, "authorization") for r in sent} <= {
        CLIENT_ANTHROPIC_KEY, f"Bearer {CLIENT_ANTHROPIC_KEY}"}
    assert all(header_of(r, "anthropic-version") for r in sent), "anthropic-version was not forwarded"
    convs = [MessagesDriver.conversation(r["body"]) for r in sent]
    if mode == "observe":
        for r in sent:
            assert r["body"]["messages"] == d.messages[: len(r["body"]["messages"])]
    for before, after in zip(convs, convs[1:]):
        assert after[: len(before)] == before


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("mode", ["fit", "observe"])
def test_thinking_blocks_go_back_unchanged(ant, loom, mock, mode, stream):
    d = MessagesDriver(ant, new_id(f"msg-think-{mode}"), mode=mode, stream=stream, helper=stream,
                       thinking=True)
    d.turn("find the parser")
    d.turn("and check the lexer in parallel with it")
    assert all(c.native and c.native[0]["type"] == "thinking" for c in d.calls), "no thinking blocks"
    assert all(c.native[0]["signature"] for c in d.calls)
    check_session(loom, d, mode)
    sent = mock.requests(PATH)
    assert len(sent) == len(d.calls)
    # Each request after the first carries every earlier turn's thinking block, signature included,
    # as the client received it.
    for i, req in enumerate(sent[1:], start=1):
        got = [
            b
            for m in req["body"]["messages"]
            if m["role"] == "assistant" and isinstance(m["content"], list)
            for b in m["content"]
            if b.get("type") == "thinking"
        ]
        want = [c.native[0] for c in d.calls[:i]]
        assert got == want, f"request {i + 1}: thinking sent {got}, received {want}"


def test_count_tokens(ant, mock):
    short = [{"role": "user", "content": "hello"}]
    long = [{"role": "user", "content": "hello " + "the quick brown fox jumps over the lazy dog " * 40}]
    a = ant.messages.count_tokens(model="claude-sonnet-4-5", messages=short)
    b = ant.messages.count_tokens(model="claude-sonnet-4-5", messages=long)
    assert 0 < a.input_tokens < b.input_tokens
    assert mock.requests(PATH + "/count_tokens") == []
