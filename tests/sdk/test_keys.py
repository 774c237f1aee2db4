"""`loom serve --auth keys`: Loom keys as the SDKs' api_key, tenants that cannot see each other,
and the server's own upstream keys on every upstream request."""

import anthropic
import openai
import pytest

import loomtest
from conftest import SDK_TIMEOUT
from convo import ChatDriver, MessagesDriver, check_session
from loomtest import LoomApi, header_of, new_id

SERVER_OPENAI_KEY = "sk-server-openai-upstream"
SERVER_ANTHROPIC_KEY = "sk-ant-server-upstream"


@pytest.fixture(scope="module")
def keyed(workdir, mock_url):
    db = workdir / f"{new_id('keys')}.db"
    key_a = loomtest.create_key(db, "tenant-a")
    key_b = loomtest.create_key(db, "tenant-b")
    assert key_a and key_b and key_a != key_b
    server = loomtest.start_loom(
        workdir, db, mock_url, name="loom-keys", auth="keys",
        env={"LOOM_UPSTREAM_OPENAI_KEY": SERVER_OPENAI_KEY, "LOOM_UPSTREAM_ANTHROPIC_KEY": SERVER_ANTHROPIC_KEY},
    )
    yield server.url, key_a, key_b
    assert server.stop() == 0, f"loom serve --auth keys did not stop cleanly; see {server.log}"


def test_tenants_are_isolated_and_upstream_sees_the_server_key(keyed, mock):
    url, key_a, key_b = keyed
    a = ChatDriver(openai.OpenAI(base_url=f"{url}/v1", api_key=key_a, max_retries=0, timeout=SDK_TIMEOUT),
                   new_id("tenant-a"))
    b = MessagesDriver(anthropic.Anthropic(base_url=url, api_key=key_b, max_retries=0, timeout=SDK_TIMEOUT),
                       new_id("tenant-b"))
    a.turn("find the config loader")
    b.turn("find the parser")
    api_a, api_b = LoomApi(url, key_a), LoomApi(url, key_b)
    check_session(api_a, a, None)
    check_session(api_b, b, None)

    # Neither tenant can read the other's session, by any route.
    for path in ("", "/events", "/receipts"):
        r = api_a.get(f"/loom/v1/sessions/{b.session}{path}")
        assert r.status == 404, f"tenant A read tenant B's session{path}: {r.status} {r.body}"
        r = api_b.get(f"/loom/v1/sessions/{a.session}{path}")
        assert r.status == 404, f"tenant B read tenant A's session{path}: {r.status} {r.body}"
    r = api_a.render(b.session, "gpt-4o", "openai-chat")
    assert r.status == 404, r
    assert [s["id"] for s in api_a.sessions()] == [a.session]
    assert [s["id"] for s in api_b.sessions()] == [b.session]

    # The upstream saw the server's keys, never a Loom key.
    sent = mock.requests()
    assert len(sent) == len(a.calls) + len(b.calls)
    for r in sent:
        values = " ".join(v for _, v in r["headers"])
        assert key_a not in values and key_b not in values, f"a Loom key went upstream: {r['headers']}"
        if r["path"] == "/v1/chat/completions":
            assert header_of(r, "authorization") == f"Bearer {SERVER_OPENAI_KEY}"
        else:
            assert header_of(r, "x-api-key") == SERVER_ANTHROPIC_KEY


def test_same_session_name_in_two_tenants_stays_apart(keyed, mock):
    url, key_a, key_b = keyed
    name = new_id("shared-name")
    a = ChatDriver(openai.OpenAI(base_url=f"{url}/v1", api_key=key_a, max_retries=0, timeout=SDK_TIMEOUT), name)
    b = ChatDriver(openai.OpenAI(base_url=f"{url}/v1", api_key=key_b, max_retries=0, timeout=SDK_TIMEOUT), name,
                   system="A different system prompt for tenant B.")
    a.turn("find the config loader")
    b.turn("look for the lexer")
    check_session(LoomApi(url, key_a), a, None)
    check_session(LoomApi(url, key_b), b, None)


def test_missing_or_unknown_keys_are_refused(keyed, mock):
    url, _, _ = keyed
    bad = openai.OpenAI(base_url=f"{url}/v1", api_key="loom-not-a-key", max_retries=0, timeout=SDK_TIMEOUT)
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    bad_ant = anthropic.Anthropic(base_url=url, api_key="loom-not-a-key", max_retries=0, timeout=SDK_TIMEOUT)
    with pytest.raises(anthropic.AuthenticationError):
        bad_ant.messages.create(model="claude-sonnet-4-5", max_tokens=64,
                                messages=[{"role": "user", "content": "hi"}])
    assert LoomApi(url).get("/loom/v1/sessions").status == 401
    assert LoomApi(url, "loom-not-a-key").get("/loom/v1/sessions").status == 401
    assert mock.requests() == []
