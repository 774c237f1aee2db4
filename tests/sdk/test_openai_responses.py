"""OpenAI Responses through `loom serve` with the official `openai` SDK."""

import pytest

from convo import ResponsesDriver, check_session
from loomtest import new_id

PATH = "/v1/responses"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("mode", ["fit", "observe"])
def test_tool_conversation(oai, loom, mock, mode, stream):
    d = ResponsesDriver(oai, new_id(f"resp-{mode}"), mode=mode, stream=stream)
    d.turn("find where the config loader lives")
    d.turn("check both places in parallel please")
    d.turn("thanks, now summarise what you found")
    assert [len(c.calls) for c in d.calls] == [1, 0, 2, 0, 1, 0]
    assert all(c.text.startswith("ok: ") for c in d.calls if not c.calls)
    check_session(loom, d, mode)
    sent = mock.requests(PATH)
    assert len(sent) == len(d.calls)
    convs = [ResponsesDriver.conversation(r["body"]) for r in sent]
    if mode == "observe":
        for r in sent:
            assert r["body"]["input"] == d.input[: len(r["body"]["input"])]
    for before, after in zip(convs, convs[1:]):
        assert after[: len(before)] == before


@pytest.mark.parametrize("mode", ["fit", "observe"])
def test_reasoning_items_go_back_unchanged(oai, loom, mock, mode):
    """A reasoning item (with its encrypted content) the client sends back reaches the model
    unchanged, and the log keeps it with the turn."""
    d = ResponsesDriver(oai, new_id(f"resp-reason-{mode}"), mode=mode, reasoning=True, stream=True)
    d.turn("find the parser")
    first = d.calls[0]
    assert first.native, "the mock sent no reasoning item"
    check_session(loom, d, mode)
    sent = mock.requests(PATH)
    assert len(sent) == 2
    items = [i for i in sent[1]["body"]["input"] if isinstance(i, dict) and i.get("type") == "reasoning"]
    assert len(items) == 1, sent[1]["body"]["input"]
    want = first.native[0]
    for key in ("id", "encrypted_content", "summary"):
        assert items[0].get(key) == want.get(key), f"{key}: sent {items[0].get(key)!r}, received {want.get(key)!r}"
