"""`loom.wrap(client, session=...)`: the OpenAI and Anthropic SDK clients, with Loom between them
and the model.

    client = loom.wrap(openai.OpenAI(), session="run-1", db=db, budget=16_000)
    client.chat.completions.create(model="gpt-4o", messages=messages, tools=tools)

Before each ``create`` the conversation the call sends is logged (only what is new since the
last call; a history that departs from the log continues in a fork ``run-1~2``, as `loom serve`
does) and Loom's render replaces it: fitted to ``budget`` (the model's window without one),
cache-stable between compaction points. After it the reply is logged and the provider's usage is
recorded against the call's receipt. Every other argument and attribute is the SDK's own.
Streaming calls (``stream=True``) are passed the render too, and offered ``loom_recall`` as the
others are (the caller gets one stream, spliced from every round's; ``_stream``); their reply is
logged once the stream has been read to its end.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional

from . import Conflict, Database, Session
from . import open as _open
from ._stream import spliced


class _Loom:
    """What the wrapped endpoints share: the database, the session and the budget."""

    def __init__(self, db: Database, session: str, budget: Optional[int]) -> None:
        self.db = db
        self.base = session
        self.budget = budget
        self.current = session
        #: The last call's render receipt (what was kept and why).
        self.last_receipt: Optional[Dict[str, Any]] = None

    def log(self, history: Any, format: str, system: Any = None) -> Session:
        """Logs ``history`` in the current session or, when it departs from that log, in a new
        fork."""
        try:
            return self.db.import_history(history, format=format, session=self.current, system=system)
        except Conflict:
            n = 2
            while self.db.session(f"{self.base}~{n}").exists():
                n += 1
            self.current = f"{self.base}~{n}"
            return self.db.import_history(history, format=format, session=self.current, system=system)

    def render(self, session: Session, model: str, format: str, tools: Any, recall: bool = False):
        rendered = session.render(model=model, budget=self.budget, format=format, tools=tools, recall=recall)
        self.last_receipt = rendered.receipt
        return rendered


#: Recall rounds one call may take before the reply goes to the caller (as `loom serve`).
_MAX_RECALL_ROUNDS = 3


def _chat_recall_tool() -> Dict[str, Any]:
    from . import recall_tool

    return {"type": "function", "function": recall_tool()}


def _offers_anthropic(tools: Any) -> bool:
    """Whether an Anthropic or Responses call may be offered `loom_recall`: none of its tools has
    the name."""
    return not any(isinstance(t, dict) and t.get("name") == "loom_recall" for t in tools or [])


def _offers(tools: Any) -> bool:
    """Whether a call may be offered `loom_recall`: none of the caller's own tools has the name."""
    for t in tools or []:
        name = (t.get("function") or {}).get("name") if isinstance(t, dict) else None
        if name == "loom_recall":
            return False
    return True


def _dump(obj: Any) -> Dict[str, Any]:
    if hasattr(obj, "model_dump"):
        return obj.model_dump(exclude_none=True, mode="json")
    return dict(obj)


def _report(session: Session, call: Optional[int], input_tokens: int, cached: Optional[int], output: Optional[int]) -> None:
    if call is None:
        return
    session.report_usage(call, input_tokens=input_tokens, cached_input_tokens=cached, output_tokens=output)


class _ChatCompletions:
    def __init__(self, inner: Any, loom: _Loom) -> None:
        self._inner = inner
        self._loom = loom

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def create(self, *, model: str, messages: List[Dict[str, Any]], **kwargs: Any) -> Any:
        session = self._loom.log([_dump(m) for m in messages], "openai")
        tools = kwargs.get("tools")
        # The call offers `loom_recall`, answered here as `loom serve` answers it (a hidden round
        # in the log, the upstream asked again), and the caller gets the final reply with the
        # text written before the call in front (streamed: as one stream).
        recall = (_offers(tools) and kwargs.get("tool_choice") != "none"
                  and getattr(self._loom.db._native, "answers_recall", True))
        if recall:
            kwargs = {**kwargs, "tools": list(tools or []) + [_chat_recall_tool()]}
        rendered = self._loom.render(session, model, "openai-chat", tools, recall=recall)
        if kwargs.get("stream"):
            return self._stream(session, rendered, model, tools, recall, kwargs)
        before: List[str] = []
        rounds = 0
        while True:
            response = self._inner.create(model=model, messages=rendered.body["messages"], **kwargs)
            message = response.choices[0].message
            own = [c for c in (message.tool_calls or []) if c.function.name == "loom_recall"]
            if not recall or not own:
                break
            if rounds >= _MAX_RECALL_ROUNDS:
                message.tool_calls = [c for c in message.tool_calls if c.function.name != "loom_recall"] or None
                break
            rounds += 1
            before.append(message.content or "")
            usage = getattr(response, "usage", None)
            if usage is not None:
                details = getattr(usage, "prompt_tokens_details", None)
                _report(session, rendered.model_call, usage.prompt_tokens,
                        getattr(details, "cached_tokens", None), usage.completion_tokens)
            session.recall_round(_dump(response), "openai-chat", model, self._loom.budget)
            rendered = self._loom.render(session, model, "openai-chat", tools, recall=True)
        if "".join(before):
            message.content = "".join(before) + (message.content or "")
        message = _dump(response.choices[0].message)
        session.append_history([_chat_message(message)], "openai")
        usage = getattr(response, "usage", None)
        if usage is not None:
            details = getattr(usage, "prompt_tokens_details", None)
            _report(session, rendered.model_call, usage.prompt_tokens,
                    getattr(details, "cached_tokens", None), usage.completion_tokens)
        return response

    def _stream(self, session: Session, rendered: Any, model: str, tools: Any, recall: bool,
                kwargs: Dict[str, Any]) -> Iterator[Any]:
        options = dict(kwargs.get("stream_options") or {})
        options.setdefault("include_usage", True)
        kwargs = {**kwargs, "stream_options": options}
        state = {"rendered": rendered}

        def again(body: Dict[str, Any]) -> Iterator[Any]:
            _report_chat(session, state["rendered"].model_call, body.get("usage"))
            session.recall_round(body, "openai-chat", model, self._loom.budget)
            state["rendered"] = self._loom.render(session, model, "openai-chat", tools, recall=True)
            return iter(self._inner.create(model=model, messages=state["rendered"].body["messages"], **kwargs))

        def finished(seen: Dict[str, Any], last: Dict[str, Any]) -> None:
            session.append_history([_chat_message(seen["choices"][0]["message"])], "openai")
            _report_chat(session, state["rendered"].model_call, last.get("usage"))

        first = self._inner.create(model=model, messages=rendered.body["messages"], **kwargs)
        return spliced("chat", iter(first), again, _MAX_RECALL_ROUNDS if recall else 0, finished)


def _report_chat(session: Session, call: Optional[int], usage: Optional[Dict[str, Any]]) -> None:
    if usage:
        details = usage.get("prompt_tokens_details") or {}
        _report(session, call, usage.get("prompt_tokens", 0), details.get("cached_tokens"),
                usage.get("completion_tokens"))


def _report_responses(session: Session, call: Optional[int], usage: Optional[Dict[str, Any]]) -> None:
    if usage:
        details = usage.get("input_tokens_details") or {}
        _report(session, call, usage.get("input_tokens", 0), details.get("cached_tokens"),
                usage.get("output_tokens"))


def _report_anthropic(session: Session, call: Optional[int], usage: Optional[Dict[str, Any]]) -> None:
    if usage:
        read = usage.get("cache_read_input_tokens") or 0
        written = usage.get("cache_creation_input_tokens") or 0
        _report(session, call, (usage.get("input_tokens") or 0) + read + written, read,
                usage.get("output_tokens"))


def _chat_message(message: Dict[str, Any]) -> Dict[str, Any]:
    """A reply as the message a client sends back: role, content, tool calls."""
    out = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        out["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}}
            for c in message["tool_calls"]
        ]
    return out


class _Chat:
    def __init__(self, inner: Any, loom: _Loom) -> None:
        self._inner = inner
        self.completions = _ChatCompletions(inner.completions, loom)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _Responses:
    def __init__(self, inner: Any, loom: _Loom) -> None:
        self._inner = inner
        self._loom = loom

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def create(self, *, model: str, input: Any, instructions: Optional[str] = None, **kwargs: Any) -> Any:
        if kwargs.get("previous_response_id") or kwargs.get("conversation"):
            # Server-side state: the provider holds the history, there is nothing to fit.
            return self._inner.create(model=model, input=input, instructions=instructions, **kwargs)
        items = [{"role": "user", "content": input}] if isinstance(input, str) else [_dump(i) for i in input]
        session = self._loom.log(items, "responses", system=instructions)
        tools = kwargs.get("tools")
        # `loom_recall` is offered and answered here, as with Chat Completions.
        recall = (_offers_anthropic(tools) and kwargs.get("tool_choice") != "none"
                  and getattr(self._loom.db._native, "answers_recall", True))
        if recall:
            from . import recall_tool

            kwargs["tools"] = list(tools or []) + [{"type": "function", **recall_tool(), "strict": False}]
        rendered = self._loom.render(session, model, "openai-responses", tools, recall=recall)
        if kwargs.get("stream"):
            state = {"rendered": rendered}

            def send() -> Iterator[Any]:
                body = state["rendered"].body
                return iter(self._inner.create(model=model, input=body["input"],
                                               instructions=body.get("instructions", instructions), **kwargs))

            def again(body: Dict[str, Any]) -> Iterator[Any]:
                _report_responses(session, state["rendered"].model_call, body.get("usage"))
                session.recall_round(body, "openai-responses", model, self._loom.budget)
                state["rendered"] = self._loom.render(session, model, "openai-responses", tools, recall=True)
                return send()

            def finished(seen: Dict[str, Any], last: Dict[str, Any]) -> None:
                session.append_history([_input_item(i) for i in seen.get("output", [])], "responses")
                _report_responses(session, state["rendered"].model_call, last.get("usage"))

            return spliced("responses", send(), again, _MAX_RECALL_ROUNDS if recall else 0, finished)
        before: List[str] = []
        rounds = 0
        while True:
            body = rendered.body
            response = self._inner.create(model=model, input=body["input"],
                                          instructions=body.get("instructions", instructions), **kwargs)
            own = [i for i in response.output if i.type == "function_call" and i.name == "loom_recall"]
            if not recall or not own:
                break
            if rounds >= _MAX_RECALL_ROUNDS:
                response.output = [i for i in response.output
                                   if not (i.type == "function_call" and i.name == "loom_recall")]
                break
            rounds += 1
            before.extend(p.text for i in response.output if i.type == "message"
                          for p in i.content if p.type == "output_text")
            usage = getattr(response, "usage", None)
            if usage is not None:
                details = getattr(usage, "input_tokens_details", None)
                _report(session, rendered.model_call, usage.input_tokens,
                        getattr(details, "cached_tokens", None), usage.output_tokens)
            session.recall_round(_dump(response), "openai-responses", model, self._loom.budget)
            rendered = self._loom.render(session, model, "openai-responses", tools, recall=True)
        prefix = "".join(before)
        if prefix:
            part = next((p for i in response.output if i.type == "message"
                         for p in i.content if p.type == "output_text"), None)
            if part is not None:
                part.text = prefix + part.text
            else:
                from openai.types.responses import ResponseOutputMessage, ResponseOutputText

                at = next((n for n, i in enumerate(response.output) if i.type != "reasoning"), len(response.output))
                response.output.insert(at, ResponseOutputMessage(
                    id="msg_loom_recall", type="message", role="assistant", status="completed",
                    content=[ResponseOutputText(type="output_text", text=prefix, annotations=[])]))
        output = [_dump(item) for item in response.output]
        session.append_history([_input_item(i) for i in output], "responses")
        usage = getattr(response, "usage", None)
        if usage is not None:
            details = getattr(usage, "input_tokens_details", None)
            _report(session, rendered.model_call, usage.input_tokens,
                    getattr(details, "cached_tokens", None), usage.output_tokens)
        return response


def _input_item(item: Dict[str, Any]) -> Dict[str, Any]:
    """An output item as the input item a client sends back."""
    kind = item.get("type")
    if kind == "function_call":
        return {"type": "function_call", "call_id": item["call_id"], "name": item["name"], "arguments": item["arguments"]}
    if kind == "message":
        return {"type": "message", "role": "assistant", "content": item.get("content", [])}
    return item


class _Messages:
    def __init__(self, inner: Any, loom: _Loom) -> None:
        self._inner = inner
        self._loom = loom

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def create(self, *, model: str, messages: List[Dict[str, Any]], system: Any = None, **kwargs: Any) -> Any:
        session = self._loom.log([_dump(m) for m in messages], "anthropic", system=system)
        tools = kwargs.get("tools")
        choice = kwargs.get("tool_choice") or {}
        # `loom_recall` is offered and answered here, as with Chat Completions.
        recall = (_offers_anthropic(tools)
                  and not (isinstance(choice, dict) and choice.get("type") == "none")
                  and getattr(self._loom.db._native, "answers_recall", True))
        if recall:
            from . import recall_tool

            t = recall_tool()
            kwargs["tools"] = list(tools or []) + [
                {"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}]
        rendered = self._loom.render(session, model, "anthropic", tools, recall=recall)
        if kwargs.get("stream"):
            state = {"rendered": rendered}

            def send() -> Iterator[Any]:
                body = state["rendered"].body
                if "system" in body:
                    kwargs["system"] = body["system"]
                return iter(self._inner.create(model=model, messages=body["messages"], **kwargs))

            def again(body: Dict[str, Any]) -> Iterator[Any]:
                _report_anthropic(session, state["rendered"].model_call, body.get("usage"))
                session.recall_round(body, "anthropic", model, self._loom.budget)
                state["rendered"] = self._loom.render(session, model, "anthropic", tools, recall=True)
                return send()

            def finished(seen: Dict[str, Any], last: Dict[str, Any]) -> None:
                session.append_history([{"role": "assistant", "content": seen["content"]}], "anthropic")
                _report_anthropic(session, state["rendered"].model_call, last.get("usage"))

            return spliced("messages", send(), again, _MAX_RECALL_ROUNDS if recall else 0, finished)
        before: List[str] = []
        rounds = 0
        while True:
            body = rendered.body
            if "system" in body:
                kwargs["system"] = body["system"]
            response = self._inner.create(model=model, messages=body["messages"], **kwargs)
            own = [b for b in response.content if b.type == "tool_use" and b.name == "loom_recall"]
            if not recall or not own:
                break
            if rounds >= _MAX_RECALL_ROUNDS:
                response.content = [b for b in response.content
                                    if not (b.type == "tool_use" and b.name == "loom_recall")]
                break
            rounds += 1
            before.extend(b.text for b in response.content if b.type == "text")
            usage = getattr(response, "usage", None)
            if usage is not None:
                read = getattr(usage, "cache_read_input_tokens", None) or 0
                written = getattr(usage, "cache_creation_input_tokens", None) or 0
                _report(session, rendered.model_call, usage.input_tokens + read + written, read, usage.output_tokens)
            session.recall_round(_dump(response), "anthropic", model, self._loom.budget)
            rendered = self._loom.render(session, model, "anthropic", tools, recall=True)
        prefix = "".join(before)
        if prefix:
            first = next((b for b in response.content if b.type == "text"), None)
            if first is not None:
                first.text = prefix + first.text
            else:
                from anthropic.types import TextBlock

                at = next((i for i, b in enumerate(response.content)
                           if b.type not in ("thinking", "redacted_thinking")), len(response.content))
                response.content.insert(at, TextBlock(type="text", text=prefix))
        content = [_dump(block) for block in response.content]
        session.append_history([{"role": "assistant", "content": content}], "anthropic")
        usage = getattr(response, "usage", None)
        if usage is not None:
            read = getattr(usage, "cache_read_input_tokens", None) or 0
            written = getattr(usage, "cache_creation_input_tokens", None) or 0
            _report(session, rendered.model_call, usage.input_tokens + read + written, read, usage.output_tokens)
        return response


class Wrapped:
    """The client, with ``chat.completions.create`` and ``responses.create`` (OpenAI) or
    ``messages.create`` (Anthropic) going through Loom; everything else is the client's."""

    def __init__(self, client: Any, loom: _Loom) -> None:
        self._client = client
        self.loom = loom
        if hasattr(client, "chat"):
            self.chat = _Chat(client.chat, loom)
        if hasattr(client, "responses"):
            self.responses = _Responses(client.responses, loom)
        if hasattr(client, "messages"):
            self.messages = _Messages(client.messages, loom)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    @property
    def session(self) -> str:
        """The Loom session the conversation is logged in (the base id, or its newest fork)."""
        return self.loom.current


def wrap(client: Any, session: str, db: Optional[Database] = None, budget: Optional[int] = None) -> Wrapped:
    """Wraps an ``openai.OpenAI`` or ``anthropic.Anthropic`` client so that each ``create``
    renders through Loom's session ``session`` in ``db`` (``loom.open()`` by default) within
    ``budget`` input tokens, and records the reply and its usage."""
    return Wrapped(client, _Loom(db if db is not None else _open(), session, budget))
