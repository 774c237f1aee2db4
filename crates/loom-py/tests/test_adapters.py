"""The adapters, against the real packages from PyPI (openai, anthropic, openai-agents,
langchain-core, langchain), their model calls answered by the mock provider."""

from __future__ import annotations

import asyncio
import json

import pytest

import loom

BIG = "\n".join(f"line {n}: def handler_{n}(request): return process(request, {n})" for n in range(400))


def test_wrap_openai_chat_fits_logs_and_records_usage(embedded, mock):
    openai = pytest.importorskip("openai")
    client = loom.wrap(openai.OpenAI(base_url=mock.url + "/v1", api_key="sk-test"),
                       session="wrapped", db=embedded, budget=3_000)
    tools = [{"type": "function", "function": {"name": "search", "description": "search the code",
              "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}]
    messages = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "find the handler"}]
    for turn in range(6):
        reply = client.chat.completions.create(model="gpt-4o", messages=messages, tools=tools)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if message.tool_calls:
            for c in message.tool_calls:
                messages.append({"role": "tool", "tool_call_id": c.id, "content": BIG})
        else:
            messages.append({"role": "user", "content": f"now step {turn}"})
    sent = mock.bodies("/v1/chat/completions")
    assert len(sent) == 6
    # What reached the model is Loom's render: within the budget, every result with its call.
    for body in sent:
        assert loom.count_request(body, "gpt-4o") <= 3_000
    assert len(json.dumps(sent[-1]["messages"])) < len(json.dumps(messages))
    # The log holds the whole conversation and every reply; every call's usage is recorded.
    log = embedded.session("wrapped")
    kinds = [e["kind"] for e in log.events()]
    assert kinds.count("assistant") == 6
    calls = log.model_calls()
    assert len(calls) == 6 and all(c["usage"] for c in calls)
    assert client.loom.last_receipt is not None


def test_wrap_answers_loom_recall_as_the_proxy_does(embedded, mock):
    openai = pytest.importorskip("openai")
    client = loom.wrap(openai.OpenAI(base_url=mock.url + "/v1", api_key="sk-test"),
                       session="rc", db=embedded, budget=3_000)
    tools = [{"type": "function", "function": {"name": "search", "description": "search the code",
              "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}}]
    messages = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "find the handler"}]
    for turn in range(4):
        reply = client.chat.completions.create(model="gpt-4o", messages=messages, tools=tools)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        for c in message.tool_calls or []:
            messages.append({"role": "tool", "tool_call_id": c.id, "content": BIG})
        if not message.tool_calls:
            messages.append({"role": "user", "content": f"now step {turn}"})
    assert "loom_recall ref=" in json.dumps(mock.bodies("/v1/chat/completions")[-1])
    before = len(mock.bodies("/v1/chat/completions"))
    messages.append({"role": "user", "content": "recall that output, please"})
    reply = client.chat.completions.create(model="gpt-4o", messages=messages, tools=tools)
    message = reply.choices[0].message
    assert message.content.startswith("Let me read that again. ")
    assert not message.tool_calls
    sent = mock.bodies("/v1/chat/completions")
    assert len(sent) == before + 2
    answer = sent[-1]["messages"][-1]
    assert answer["role"] == "tool" and answer["content"].startswith("line 0: def handler_0")
    kinds = [e["kind"] for e in embedded.session("rc").events()]
    assert "hidden" in kinds
    # The next call extends the same session.
    messages.append(message.model_dump(exclude_none=True))
    messages.append({"role": "user", "content": "go on"})
    client.chat.completions.create(model="gpt-4o", messages=messages, tools=tools)
    assert client.session == "rc"
    assert loom.recall_tool()["name"] == "loom_recall"


def test_wrap_openai_streams_and_a_departing_history_forks(embedded, mock):
    openai = pytest.importorskip("openai")
    client = loom.wrap(openai.OpenAI(base_url=mock.url + "/v1", api_key="sk-test"), session="s", db=embedded)
    messages = [{"role": "user", "content": "hello there"}]
    chunks = list(client.chat.completions.create(model="gpt-4o", messages=messages, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("ok:")
    events = embedded.session("s").events()
    assert events[-1]["kind"] == "assistant" and text in json.dumps(events[-1])
    assert embedded.session("s").model_calls()[0]["usage"]
    # The client edits its history: the conversation continues in a fork, the log stays.
    client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "another start"}])
    assert client.session == "s~2"
    assert len(embedded.session("s").events()) == 2


def test_wrap_openai_responses(embedded, mock):
    openai = pytest.importorskip("openai")
    client = loom.wrap(openai.OpenAI(base_url=mock.url + "/v1", api_key="sk-test"), session="r", db=embedded)
    response = client.responses.create(model="gpt-4o", input="list the files", instructions="be brief")
    assert response.output_text.startswith("ok:")
    kinds = [e["kind"] for e in embedded.session("r").events()]
    assert kinds == ["system", "user", "assistant"]
    assert embedded.session("r").model_calls()[0]["usage"]["input_tokens"] > 0


def test_wrap_anthropic(embedded, mock):
    anthropic = pytest.importorskip("anthropic")
    client = loom.wrap(anthropic.Anthropic(base_url=mock.url, api_key="sk-test"), session="a", db=embedded, budget=4_000)
    messages = [{"role": "user", "content": "summarise the repo"}]
    reply = client.messages.create(model="claude-sonnet-4-5", max_tokens=256, system="be brief", messages=messages)
    assert reply.content[0].text.startswith("ok:")
    kinds = [e["kind"] for e in embedded.session("a").events()]
    assert kinds == ["system", "user", "assistant"]
    sent = mock.bodies("/v1/messages")[-1]
    assert sent["system"] and sent["messages"][0]["role"] == "user"
    assert embedded.session("a").model_calls()[0]["usage"]


def test_openai_agents_session(embedded, mock):
    agents = pytest.importorskip("agents")
    from openai import AsyncOpenAI

    from loom.agents import LoomSession

    agents.set_tracing_disabled(True)
    model = agents.OpenAIResponsesModel(model="gpt-4o", openai_client=AsyncOpenAI(base_url=mock.url + "/v1", api_key="sk-test"))

    @agents.function_tool
    def search(query: str) -> str:
        """Search the code base."""
        return BIG

    agent = agents.Agent(name="coder", instructions="You fix bugs.", tools=[search], model=model)
    session = LoomSession("agent-run", db=embedded, model="gpt-4o", budget=3_000)
    assert isinstance(session, agents.memory.session.SessionABC)

    async def run() -> None:
        for ask in ["find the handler", "and the other handler", "one more search please"]:
            result = await agents.Runner.run(agent, ask, session=session)
            assert result.final_output.startswith("ok:")

    asyncio.run(run())
    log = session.log
    kinds = [e["kind"] for e in log.events()]
    assert kinds.count("user") == 3 and kinds.count("tool_result") == 3
    # Each run starts from Loom's render of the session, within the budget (plus the run's new
    # message and the agent's tools, which the SDK adds); within a run the SDK sends the run's
    # own new items as they are.
    sent = mock.bodies("/v1/responses")
    assert len(sent) == 6
    for first_call in (sent[2], sent[4]):
        assert loom.count_request(first_call, "gpt-4o", "openai-responses") <= 3_000 + 300
    assert json.dumps(sent[-1]).count("handler_399(") <= 1
    items = asyncio.run(session.get_items())
    assert items and session.last_receipt is not None
    assert len(asyncio.run(session.get_items(limit=2))) == 2
    # pop_item and clear_session continue in forks; the log is never rewritten.
    before = len(log.events())
    popped = asyncio.run(session.pop_item())
    assert popped is not None
    assert session.log.id == "agent-run~2" and len(session.log.events()) == before - 1
    assert len(embedded.session("agent-run").events()) == before
    asyncio.run(session.clear_session())
    assert asyncio.run(session.get_items()) == [] and session.log.id == "agent-run~3"
    # A new LoomSession on the same id continues where the conversation is now.
    again = LoomSession("agent-run", db=embedded)
    assert again.log.id == "agent-run~3"


def test_langchain_history_counter_and_middleware(embedded):
    pytest.importorskip("langchain_core")
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage, trim_messages

    from loom.langchain import LoomChatMessageHistory, token_counter

    history = LoomChatMessageHistory("lc", db=embedded, model="gpt-4o", budget=2_000)
    history.add_messages([SystemMessage("You fix bugs."), HumanMessage("find the handler")])
    history.add_messages([AIMessage("", tool_calls=[{"id": "c1", "name": "search", "args": {"query": "handler"}}])])
    # A result added in a later batch answers the call logged before it.
    history.add_messages([ToolMessage(BIG, tool_call_id="c1"), AIMessage("found it")])
    msgs = history.messages
    assert [m.type for m in msgs] == ["system", "human", "ai", "tool", "ai"]
    assert loom.count_request({"messages": [{"role": "user", "content": "x"}]}, "gpt-4o") > 0
    # The render fits the budget: the large output is shortened, the pairing kept.
    assert len(msgs[3].content) < len(BIG)
    count = token_counter("gpt-4o")
    full = [SystemMessage("You fix bugs."), HumanMessage("find the handler"),
            AIMessage("", tool_calls=[{"id": "c1", "name": "search", "args": {"query": "handler"}}]),
            ToolMessage(BIG, tool_call_id="c1"), AIMessage("found it")]
    assert count(full) == loom.count_request(
        {"messages": [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "find the handler"},
                      {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{\"query\": \"handler\"}"}}]},
                      {"role": "tool", "tool_call_id": "c1", "content": BIG}, {"role": "assistant", "content": "found it"}]},
        "gpt-4o")
    trimmed = trim_messages(full, max_tokens=count(full[:2]) + 10, token_counter=count, strategy="last", include_system=True)
    assert count(trimmed) <= count(full[:2]) + 10
    # Passed as it is, it counts for gpt-4o.
    assert token_counter(full) == count(full)
    assert trim_messages(full, max_tokens=count(full[:2]) + 10, token_counter=token_counter,
                         strategy="last", include_system=True) == trimmed
    history.clear()
    assert history.messages == []


def test_langchain_agent_middleware(embedded):
    pytest.importorskip("langchain")
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    from loom.langchain import LoomContextMiddleware

    seen = []

    class Recording(GenericFakeChatModel):
        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            seen.append(list(messages))
            return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)

        def bind_tools(self, tools, **kwargs):
            return self

    model = Recording(messages=iter([AIMessage("done")]))
    middleware = LoomContextMiddleware(embedded, model="gpt-4o", budget=1_500, session="lc-agent")
    agent = create_agent(model, tools=[], middleware=[middleware], system_prompt="You fix bugs.")
    history = [HumanMessage("find the handler"),
               AIMessage("", tool_calls=[{"id": "c1", "name": "search", "args": {"query": "x"}}]),
               ToolMessage(BIG, tool_call_id="c1"),
               HumanMessage("and now?")]
    out = agent.invoke({"messages": history})
    assert out["messages"][-1].content == "done"
    # The model saw Loom's render: the same turns, the large output cut to fit 1,500 tokens.
    sent = seen[-1]
    assert [m.type for m in sent] == ["system", "human", "ai", "tool", "human"]
    assert len(sent[3].content) < len(BIG)
    assert middleware.last_receipt is not None
    assert [e["kind"] for e in embedded.session("lc-agent").events()] == ["system", "user", "assistant", "tool_result", "user"]


def test_wrap_anthropic_answers_loom_recall(embedded, mock):
    anthropic = pytest.importorskip("anthropic")
    client = loom.wrap(anthropic.Anthropic(base_url=mock.url, api_key="sk-test"),
                       session="arc", db=embedded, budget=3_000)
    tools = [{"name": "search", "description": "search the code",
              "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}}]
    messages = [{"role": "user", "content": "find the handler"}]
    for turn in range(4):
        reply = client.messages.create(model="claude-sonnet-4-5", max_tokens=256, messages=messages, tools=tools)
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        calls = [b for b in reply.content if b.type == "tool_use"]
        if calls:
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": c.id, "content": BIG} for c in calls]})
        else:
            messages.append({"role": "user", "content": f"now step {turn}"})
    assert "loom_recall ref=" in json.dumps(mock.bodies("/v1/messages")[-1])
    messages.append({"role": "user", "content": "recall that output, please"})
    reply = client.messages.create(model="claude-sonnet-4-5", max_tokens=256, messages=messages, tools=tools)
    assert [b.type for b in reply.content] == ["text"]
    assert reply.content[0].text.startswith("Let me read that again. ")
    assert "hidden" in [e["kind"] for e in embedded.session("arc").events()]
    messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
    messages.append({"role": "user", "content": "go on"})
    client.messages.create(model="claude-sonnet-4-5", max_tokens=256, messages=messages, tools=tools)
    assert client.session == "arc"


def test_wrap_openai_responses_answers_loom_recall(embedded, mock):
    openai = pytest.importorskip("openai")
    client = loom.wrap(openai.OpenAI(base_url=mock.url + "/v1", api_key="sk-test"),
                       session="rrc", db=embedded, budget=3_000)
    tools = [{"type": "function", "name": "search", "description": "search the code",
              "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}]
    items = [{"role": "user", "content": "find the handler"}]
    for turn in range(4):
        response = client.responses.create(model="gpt-4o", input=items, tools=tools)
        calls = [i for i in response.output if i.type == "function_call"]
        for i in response.output:
            items.append(i.model_dump(exclude_none=True))
        for c in calls:
            items.append({"type": "function_call_output", "call_id": c.call_id, "output": BIG})
        if not calls:
            items.append({"role": "user", "content": f"now step {turn}"})
    assert "loom_recall ref=" in json.dumps(mock.bodies("/v1/responses")[-1])
    items.append({"role": "user", "content": "recall that output, please"})
    response = client.responses.create(model="gpt-4o", input=items, tools=tools)
    assert response.output_text.startswith("Let me read that again. ")
    assert not [i for i in response.output if i.type == "function_call"]
    assert "hidden" in [e["kind"] for e in embedded.session("rrc").events()]


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_wrap_streams_answer_loom_recall_as_one_stream(embedded, mock, api):
    """Streamed, the caller gets one stream spliced from both rounds: numbered on, no second
    start, no loom_recall call; the log has the hidden round; the next call extends the session."""
    if api == "messages":
        sdk = pytest.importorskip("anthropic")
        client = loom.wrap(sdk.Anthropic(base_url=mock.url, api_key="sk-test"),
                           session=f"s-{api}", db=embedded, budget=3_000)
        tools = [{"name": "search", "description": "search the code",
                  "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}}]
    else:
        sdk = pytest.importorskip("openai")
        client = loom.wrap(sdk.OpenAI(base_url=mock.url + "/v1", api_key="sk-test"),
                           session=f"s-{api}", db=embedded, budget=3_000)
        params = {"type": "object", "properties": {"query": {"type": "string"}}}
        tools = ([{"type": "function", "function": {"name": "search", "description": "search the code",
                                                      "parameters": params}}] if api == "chat" else
                 [{"type": "function", "name": "search", "description": "search the code", "parameters": params}])
    history = [{"role": "user", "content": "find the handler"}]

    def call():
        """One streamed call; returns its text, its calls (id, name) and the events' checks."""
        text, calls = "", []
        if api == "chat":
            ids, index = set(), {}
            for chunk in client.chat.completions.create(model="gpt-4o", messages=history, tools=tools, stream=True):
                ids.add(chunk.id)
                for ch in chunk.choices:
                    text += ch.delta.content or ""
                    for tc in ch.delta.tool_calls or []:
                        slot = index.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                        slot["id"] = tc.id or slot["id"]
                        if tc.function is not None:
                            slot["name"] += tc.function.name or ""
                            slot["arguments"] += tc.function.arguments or ""
            assert len(ids) == 1, ids
            calls = [index[i] for i in sorted(index)]
            history.append({"role": "assistant", "content": text or None, **({"tool_calls": [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in calls]} if calls else {})})
        elif api == "responses":
            seqs, final = [], None
            for event in client.responses.create(model="gpt-4o", input=history, tools=tools, stream=True):
                seqs.append(event.sequence_number)
                if event.type == "response.completed":
                    final = event.response
            assert seqs == list(range(len(seqs))), seqs
            text = final.output_text
            calls = [{"id": i.call_id, "name": i.name} for i in final.output if i.type == "function_call"]
            history.extend(i.model_dump(exclude_none=True) for i in final.output)
        else:
            starts, blocks, partial = 0, {}, {}
            for event in client.messages.create(model="claude-sonnet-4-5", max_tokens=256, messages=history,
                                                tools=tools, stream=True):
                if event.type == "message_start":
                    starts += 1
                elif event.type == "content_block_start":
                    assert event.index == len(blocks), (event.index, blocks)
                    blocks[event.index] = event.content_block.model_dump(exclude_none=True)
                elif event.type == "content_block_delta" and event.delta.type == "text_delta":
                    blocks[event.index]["text"] += event.delta.text
                elif event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                    partial[event.index] = partial.get(event.index, "") + event.delta.partial_json
            assert starts == 1
            for i, raw in partial.items():
                blocks[i]["input"] = json.loads(raw) if raw else {}
            text = "".join(b.get("text", "") for b in blocks.values() if b["type"] == "text")
            calls = [{"id": b["id"], "name": b["name"]} for b in blocks.values() if b["type"] == "tool_use"]
            content = list(blocks.values())
            history.append({"role": "assistant", "content": content})
        return text, calls

    def results(calls):
        if api == "chat":
            history.extend({"role": "tool", "tool_call_id": c["id"], "content": BIG} for c in calls)
        elif api == "responses":
            history.extend({"type": "function_call_output", "call_id": c["id"], "output": BIG} for c in calls)
        else:
            history.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": c["id"], "content": BIG} for c in calls]})

    for turn in range(4):
        _, calls = call()
        if calls:
            results(calls)
        else:
            history.append({"role": "user", "content": f"now step {turn}"})
    path = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}[api]
    assert "loom_recall ref=" in json.dumps(mock.bodies(path)[-1])
    before = len(mock.bodies(path))
    history.append({"role": "user", "content": "recall that output, please"})
    text, calls = call()
    assert text.startswith("Let me read that again. ") and text != "Let me read that again. ", text
    assert not calls, calls
    assert len(mock.bodies(path)) == before + 2
    assert "hidden" in [e["kind"] for e in embedded.session(f"s-{api}").events()]
    history.append({"role": "user", "content": "go on"})
    call()
    assert client.session == f"s-{api}", "the next call extends the session"
