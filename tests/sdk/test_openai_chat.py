"""OpenAI Chat Completions through `loom serve` with the official `openai` SDK."""

import openai
import pytest

from conftest import CLIENT_OPENAI_KEY, SDK_TIMEOUT
from convo import ChatDriver, check_session
from loomtest import header_of, new_id

PATH = "/v1/chat/completions"


def run_conversation(d: ChatDriver) -> None:
    d.turn("find where the config loader lives")
    d.turn("check both places in parallel please")
    d.turn("thanks, now summarise what you found")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("mode", ["fit", "observe"])
def test_tool_conversation(oai, loom, mock, mode, stream):
    d = ChatDriver(oai, new_id(f"chat-{mode}"), mode=mode, stream=stream)
    run_conversation(d)
    # The SDK parsed every reply: a call, text, two parallel calls, text, a call, text.
    assert [len(c.calls) for c in d.calls] == [1, 0, 2, 0, 1, 0]
    assert all(c.text.startswith("ok: ") for c in d.calls if not c.calls)
    assert [c.calls[i][1] for c in d.calls[2:3] for i in range(2)] == ["search", "read_file"]
    receipts = check_session(loom, d, mode)
    if mode == "fit":
        assert all(r["receipt"] and r["receipt"]["estimate"] > 0 for r in receipts), receipts
    sent = mock.requests(PATH)
    assert len(sent) == len(d.calls)
    # Under --auth none the client's own key goes upstream.
    assert {header_of(r, "authorization") for r in sent} == {f"Bearer {CLIENT_OPENAI_KEY}"}
    if stream:
        assert all(r["body"].get("stream_options") == {"include_usage": True} for r in sent)
    convs = [ChatDriver.conversation(r["body"]) for r in sent]
    if mode == "observe":
        # Forwarded unchanged: each request is the client's history as it stood.
        for conv in convs:
            assert conv == d.messages[: len(conv)]
    # Far under the window: no compaction, so every request extends the one before.
    for before, after in zip(convs, convs[1:]):
        assert after[: len(before)] == before


def test_mode_from_default_headers(loom_url, loom, mock):
    client = openai.OpenAI(base_url=f"{loom_url}/v1", api_key=CLIENT_OPENAI_KEY, max_retries=0,
                           timeout=SDK_TIMEOUT, default_headers={"X-Loom-Mode": "observe"})
    d = ChatDriver(client, new_id("chat-default-headers"))
    d.turn("look for the readme")
    check_session(loom, d, "observe")


def test_session_without_header_is_derived_and_stable(oai, loom, mock):
    """A client that names no session still gets one, and its next call lands in it."""
    opening = new_id("opening")
    messages = [{"role": "system", "content": opening}, {"role": "user", "content": "hello there"}]
    first = oai.chat.completions.with_raw_response.create(model="gpt-4o", messages=messages)
    reply = first.parse().choices[0].message.content
    session = first.headers.get("x-loom-session")
    assert session, "no X-Loom-Session on the reply"
    messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": "and again"}]
    second = oai.chat.completions.with_raw_response.create(model="gpt-4o", messages=messages)
    second.parse()
    assert second.headers.get("x-loom-session") == session
    kinds = [e["kind"] for e in loom.events(session)]
    assert kinds == ["system", "user", "assistant", "user", "assistant"]


def test_models_list(oai, mock):
    names = [m.id for m in oai.models.list()]
    assert "gpt-4o" in names


def test_budget_below_the_floor_is_a_400_naming_it(oai, loom, mock):
    d = ChatDriver(oai, new_id("tiny-budget"), mode="fit", budget=30)
    d.say("hello")
    with pytest.raises(openai.BadRequestError) as caught:
        d.call()
    assert "floor" in caught.value.message, caught.value.message
    assert mock.requests() == [], "an over-budget request went upstream"


def test_an_edited_history_forks_and_leaves_the_log_alone(oai, loom, mock):
    d = ChatDriver(oai, new_id("diverge"))
    d.turn("find the config loader")
    check_session(loom, d, None)
    before = loom.events(d.session)
    d.messages[1]["content"] = "find the edited loader"
    c = d.call()
    assert c.diverged == d.session
    assert c.session and c.session != d.session
    assert loom.events(d.session) == before, "the original log was rewritten"
    forked = [e["kind"] for e in loom.events(c.session)]
    assert forked == [e["kind"] for e in before] + ["assistant"]
    assert loom.get(f"/loom/v1/sessions/{c.session}").body["parent"] == d.session
