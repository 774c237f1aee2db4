"""Errors through `loom serve`: the upstream's faults reach the SDK as its usual exceptions, a
request Loom refuses gets a 400 in the provider's own shape, and neither leaves a partial turn."""

import anthropic
import openai
import pytest

from conftest import CLIENT_ANTHROPIC_KEY
from convo import ChatDriver, MessagesDriver, ResponsesDriver, check_session
from loomtest import http, new_id


def kinds(loom, session):
    return [e["kind"] for e in loom.events(session)]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(
    "status,error", [(429, openai.RateLimitError), (500, openai.InternalServerError)], ids=["429", "500"]
)
def test_chat_upstream_errors(oai, loom, mock, status, error, stream):
    d = ChatDriver(oai, new_id("err-chat"), stream=stream)
    d.say("find the config loader")
    mock.fault(status=status)
    with pytest.raises(error) as caught:
        d.call()
    assert caught.value.status_code == status
    assert caught.value.message
    assert kinds(loom, d.session) == ["system", "user"], "a failed call left a turn in the log"
    # The same history again succeeds and is logged once.
    d.call()
    d.answer_tools()
    d.call()
    check_session(loom, d, None)


def test_responses_upstream_error(oai, loom, mock):
    d = ResponsesDriver(oai, new_id("err-resp"))
    d.say("find the config loader")
    mock.fault(status=500)
    with pytest.raises(openai.InternalServerError):
        d.call()
    assert kinds(loom, d.session) == ["system", "user"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(
    "status,error",
    [(429, anthropic.RateLimitError), (500, anthropic.InternalServerError), (529, anthropic.APIStatusError)],
    ids=["429", "500", "529"],
)
def test_anthropic_upstream_errors(ant, loom, mock, status, error, stream):
    d = MessagesDriver(ant, new_id("err-msg"), stream=stream)
    d.say("find the config loader")
    mock.fault(status=status)
    with pytest.raises(error) as caught:
        d.call()
    assert caught.value.status_code == status
    if status == 529:
        assert isinstance(caught.value, anthropic.InternalServerError)
        assert caught.value.body["error"]["type"] == "overloaded_error"
    assert kinds(loom, d.session) == ["system", "user"]


ALL = [(ChatDriver, "oai"), (ResponsesDriver, "oai"), (MessagesDriver, "ant")]
ALL_IDS = ["chat", "responses", "messages"]


@pytest.mark.parametrize("make,client", ALL, ids=ALL_IDS)
def test_stream_cut_midway_is_an_error_and_logs_nothing(request, loom, mock, make, client):
    d = make(request.getfixturevalue(client), new_id("cut"), stream=True)
    d.say("find the config loader")
    mock.fault(drop_after_bytes=200)
    with pytest.raises(Exception) as caught:  # noqa: PT011 (the SDKs raise different classes here)
        d.call()
    assert not isinstance(caught.value, AssertionError), f"the SDK raised no error for a cut stream: {caught.value}"
    assert kinds(loom, d.session) == ["system", "user"], "a broken stream left a partial turn"


def test_anthropic_without_max_tokens_is_refused_by_loom(loom_url, mock):
    r = http(
        "POST",
        f"{loom_url}/v1/messages",
        body={"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hi"}]},
        headers={"x-api-key": CLIENT_ANTHROPIC_KEY, "anthropic-version": "2023-06-01",
                 "X-Loom-Session": new_id("bad")},
    )
    assert r.status == 400, r
    assert r.body["type"] == "error", r.body
    assert r.body["error"]["type"] == "invalid_request_error", r.body
    assert "max_tokens" in r.body["error"]["message"], r.body
    assert mock.requests() == [], "Loom forwarded a request it should have refused"


def test_chat_tool_message_answering_no_call_is_refused(oai, mock):
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "tool", "tool_call_id": "call_nowhere", "content": "orphan"},
    ]
    with pytest.raises(openai.BadRequestError) as caught:
        oai.chat.completions.create(model="gpt-4o", messages=messages,
                                    extra_headers={"X-Loom-Session": new_id("bad")})
    assert caught.value.status_code == 400
    assert isinstance(caught.value.body, dict) and caught.value.body.get("message"), caught.value.body
    assert mock.requests() == []


def test_responses_output_answering_no_call_is_refused(oai, mock):
    with pytest.raises(openai.BadRequestError):
        oai.responses.create(
            model="gpt-4o",
            input=[{"role": "user", "content": "hi"},
                   {"type": "function_call_output", "call_id": "call_nowhere", "output": "orphan"}],
            extra_headers={"X-Loom-Session": new_id("bad")},
        )
    assert mock.requests() == []


def test_bad_loom_headers_are_refused(oai, mock):
    with pytest.raises(openai.BadRequestError):
        oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}],
                                    extra_headers={"X-Loom-Mode": "sideways"})
    with pytest.raises(openai.BadRequestError):
        oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}],
                                    extra_headers={"X-Loom-Budget": "-3"})
    assert mock.requests() == []


@pytest.mark.parametrize("make,client", ALL, ids=ALL_IDS)
def test_streams_arriving_a_byte_at_a_time(request, loom, mock, make, client):
    """Upstream SSE split at every byte: Loom relays it, the SDK parses it, the log is whole."""
    d = make(request.getfixturevalue(client), new_id("bytes"), stream=True, mode="fit")
    mock.default_fault({"chunk_bytes": 1})
    d.turn("check both places in parallel please")
    mock.default_fault(None)
    assert [len(c.calls) for c in d.calls] == [2, 0]
    check_session(loom, d, "fit")
