"""Conversations driven through the real SDKs, one driver per provider API.

A driver keeps the history the way an agent does (it sends everything back each call), records
what every reply said (text, tool calls, thinking, usage, Loom's headers), and keeps the list of
events Loom's log must hold afterwards, in the same normalised form that `normalise` gives a
logged event. The mock upstream answers a user turn with tool calls and a tool result with text,
so `turn` runs user -> calls -> results -> text.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

SYSTEM = "You are a careful test agent. Use the tools when asked."
SCHEMA = {
    "type": "object",
    "properties": {"query": {"type": "string", "description": "what to look for"}},
    "required": ["query"],
}
TOOLS = [("search", "Searches the project for a phrase."), ("read_file", "Reads one file of the project.")]

# Most model calls one user turn may take before the test calls it a loop.
MAX_CALLS_PER_TURN = 4


def default_output(name: str, call_id: str, args: object) -> str:
    """A tool output that differs per call, so a misplaced result shows."""
    return f"{name} found 3 matches for {json.dumps(args, sort_keys=True)} (call {call_id})"


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def parse_args(text: str) -> object:
    try:
        return json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return text


@dataclass
class Call:
    """One model call as the client saw it."""

    call_id: int | None
    session: str | None
    mode: str | None
    diverged: str | None
    usage: dict  # input_tokens, cached_input_tokens, output_tokens as Loom must record them
    text: str
    calls: list  # [(id, name, args)]
    native: list = field(default_factory=list)


def _headers(raw_headers) -> tuple[int | None, str | None, str | None, str | None]:
    call = raw_headers.get("x-loom-call")
    return (
        int(call) if call and call.isdigit() else None,
        raw_headers.get("x-loom-session"),
        raw_headers.get("x-loom-mode"),
        raw_headers.get("x-loom-diverged"),
    )


class Driver:
    """What every API's driver shares: the history, the expected log and the calls made."""

    api = ""
    model = ""
    render_format = ""

    def __init__(self, client, session: str, *, mode: str | None = None, budget: int | None = None,
                 stream: bool = False, tools: bool = True, system: str | None = SYSTEM):
        self.client = client
        self.session = session
        self.mode = mode
        self.budget = budget
        self.stream = stream
        self.tools = tools
        self.system = system
        self.expected: list[dict] = []
        self.calls: list[Call] = []
        self.pending: list[tuple[str, str, object]] = []
        # Calls that raised: Loom recorded them (a receipt without usage), the client got nothing.
        self.failed = 0
        if system is not None:
            self.expected.append({"kind": "system", "text": system})

    def headers(self) -> dict:
        h = {"X-Loom-Session": self.session}
        if self.mode:
            h["X-Loom-Mode"] = self.mode
        if self.budget:
            h["X-Loom-Budget"] = str(self.budget)
        return h

    def say(self, text: str) -> None:
        self._push_user(text)
        self.expected.append({"kind": "user", "text": text})

    def call(self) -> Call:
        """Sends the history; the reply joins it, and the log's expectations."""
        try:
            c = self._send()
        except BaseException:
            self.failed += 1
            raise
        self.calls.append(c)
        event = {"kind": "assistant", "text": c.text, "calls": c.calls}
        if c.native:
            event["native"] = c.native
        self.expected.append(event)
        self.pending = list(c.calls)
        return c

    def answer_tools(self, output=default_output) -> None:
        results = []
        for cid, name, args in self.pending:
            out = output(name, cid, args)
            results.append((cid, out))
            self.expected.append({"kind": "tool_result", "call_id": cid, "sha256": sha256(out), "text": out})
        self._push_results(results)
        self.pending = []

    def turn(self, text: str, output=default_output) -> list[Call]:
        """A user message, then calls until the model answers with text."""
        self.say(text)
        made = []
        for _ in range(MAX_CALLS_PER_TURN):
            made.append(self.call())
            if not self.pending:
                return made
            self.answer_tools(output)
        raise AssertionError(f"{self.api}: no text answer after {MAX_CALLS_PER_TURN} calls")

    # Per API.
    def _push_user(self, text: str) -> None:
        raise NotImplementedError

    def _push_results(self, results: list[tuple[str, str]]) -> None:
        raise NotImplementedError

    def _send(self) -> Call:
        raise NotImplementedError

    @staticmethod
    def conversation(body: dict) -> list:
        """The conversation part of a request body (what must only grow between compactions)."""
        raise NotImplementedError


class ChatDriver(Driver):
    api = "chat"
    model = "gpt-4o"
    render_format = "openai-chat"

    def __init__(self, client, session: str, **kw):
        super().__init__(client, session, **kw)
        self.messages: list[dict] = []
        if self.system is not None:
            self.messages.append({"role": "system", "content": self.system})

    def _push_user(self, text):
        self.messages.append({"role": "user", "content": text})

    def _push_results(self, results):
        for cid, out in results:
            self.messages.append({"role": "tool", "tool_call_id": cid, "content": out})

    def tool_specs(self) -> list[dict]:
        return [
            {"type": "function", "function": {"name": n, "description": d, "parameters": SCHEMA}}
            for n, d in TOOLS
        ]

    def _send(self) -> Call:
        kw: dict = {"model": self.model, "messages": self.messages, "extra_headers": self.headers()}
        if self.tools:
            kw["tools"] = self.tool_specs()
        if self.stream:
            kw["stream"] = True
            kw["stream_options"] = {"include_usage": True}
        raw = self.client.chat.completions.with_raw_response.create(**kw)
        call_id, session, mode, diverged = _headers(raw.headers)
        if self.stream:
            text, calls, usage = "", {}, None
            for chunk in raw.parse():
                if chunk.usage is not None:
                    usage = chunk.usage
                for choice in chunk.choices:
                    d = choice.delta
                    if d.content:
                        text += d.content
                    for tc in d.tool_calls or []:
                        slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                        if tc.id:
                            slot["id"] = tc.id
                        if tc.function and tc.function.name:
                            slot["name"] += tc.function.name
                        if tc.function and tc.function.arguments:
                            slot["arguments"] += tc.function.arguments
            made = [(c["id"], c["name"], c["arguments"]) for _, c in sorted(calls.items())]
        else:
            comp = raw.parse()
            msg = comp.choices[0].message
            text = msg.content or ""
            made = [(t.id, t.function.name, t.function.arguments) for t in msg.tool_calls or []]
            usage = comp.usage
        assert usage is not None, "the reply carried no usage"
        details = usage.prompt_tokens_details
        cached = details.cached_tokens if details is not None else None
        assistant: dict = {"role": "assistant", "content": text or None}
        if made:
            assistant["tool_calls"] = [
                {"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in made
            ]
        self.messages.append(assistant)
        return Call(
            call_id, session, mode, diverged,
            {"input_tokens": usage.prompt_tokens, "cached_input_tokens": cached,
             "output_tokens": usage.completion_tokens},
            text, [(i, n, parse_args(a)) for i, n, a in made],
        )

    @staticmethod
    def conversation(body: dict) -> list:
        return list(body.get("messages", []))


class ResponsesDriver(Driver):
    api = "responses"
    model = "gpt-4o"
    render_format = "openai-responses"

    def __init__(self, client, session: str, *, reasoning: bool = False, **kw):
        super().__init__(client, session, **kw)
        self.input: list[dict] = []
        self.reasoning = reasoning
        if reasoning:
            self.model = "o3-mini"

    def _push_user(self, text):
        self.input.append({"role": "user", "content": text})

    def _push_results(self, results):
        for cid, out in results:
            self.input.append({"type": "function_call_output", "call_id": cid, "output": out})

    def _send(self) -> Call:
        kw: dict = {"model": self.model, "input": self.input, "extra_headers": self.headers()}
        if self.system is not None:
            kw["instructions"] = self.system
        if self.tools:
            kw["tools"] = [
                {"type": "function", "name": n, "description": d, "parameters": SCHEMA, "strict": False}
                for n, d in TOOLS
            ]
        if self.reasoning:
            kw["reasoning"] = {"effort": "low", "summary": "auto"}
            kw["include"] = ["reasoning.encrypted_content"]
            kw["store"] = False
        if self.stream:
            kw["stream"] = True
        raw = self.client.responses.with_raw_response.create(**kw)
        call_id, session, mode, diverged = _headers(raw.headers)
        if self.stream:
            resp = None
            for event in raw.parse():
                if event.type == "response.completed":
                    resp = event.response
            assert resp is not None, "the stream ended without response.completed"
        else:
            resp = raw.parse()
        text, made, native = "", [], []
        for item in resp.output:
            dumped = item.model_dump(exclude_none=True, mode="json")
            if item.type == "message":
                text += "".join(p.text for p in item.content if p.type == "output_text")
            elif item.type == "function_call":
                made.append((item.call_id, item.name, item.arguments))
            elif item.type == "reasoning":
                native.append(dumped)
            self.input.append(dumped)
        usage = resp.usage
        assert usage is not None, "the reply carried no usage"
        details = usage.input_tokens_details
        return Call(
            call_id, session, mode, diverged,
            {"input_tokens": usage.input_tokens,
             "cached_input_tokens": details.cached_tokens if details is not None else None,
             "output_tokens": usage.output_tokens},
            text, [(i, n, parse_args(a)) for i, n, a in made], native,
        )

    @staticmethod
    def conversation(body: dict) -> list:
        items = body.get("input", [])
        if isinstance(items, str):
            items = [{"role": "user", "content": items}]
        head = [{"instructions": body["instructions"]}] if "instructions" in body else []
        return head + list(items)


class MessagesDriver(Driver):
    api = "messages"
    model = "claude-sonnet-4-5"
    render_format = "anthropic"

    def __init__(self, client, session: str, *, thinking: bool = False, helper: bool = False, **kw):
        super().__init__(client, session, **kw)
        self.messages: list[dict] = []
        self.thinking = thinking
        # `helper`: stream with client.messages.stream(...) rather than create(stream=True).
        self.helper = helper

    def _push_user(self, text):
        self.messages.append({"role": "user", "content": text})

    def _push_results(self, results):
        self.messages.append({
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": cid, "content": out} for cid, out in results],
        })

    def _send(self) -> Call:
        kw: dict = {"model": self.model, "max_tokens": 2048, "messages": self.messages,
                    "extra_headers": self.headers()}
        if self.system is not None:
            kw["system"] = self.system
        if self.tools:
            kw["tools"] = [{"name": n, "description": d, "input_schema": SCHEMA} for n, d in TOOLS]
        if self.thinking:
            kw["thinking"] = {"type": "enabled", "budget_tokens": 1024}
        if self.stream and self.helper:
            with self.client.messages.stream(**kw) as s:
                for _ in s:
                    pass
                msg = s.get_final_message()
                hdrs = s.response.headers
        elif self.stream:
            raw = self.client.messages.with_raw_response.create(stream=True, **kw)
            hdrs = raw.headers
            msg = _assemble_anthropic(raw.parse())
        else:
            raw = self.client.messages.with_raw_response.create(**kw)
            hdrs = raw.headers
            msg = raw.parse()
        call_id, session, mode, diverged = _headers(hdrs)
        text, made, native, blocks = "", [], [], []
        for b in msg.content:
            if b.type == "text":
                text += b.text
                blocks.append({"type": "text", "text": b.text})
            elif b.type == "tool_use":
                made.append((b.id, b.name, b.input))
                blocks.append({"type": "tool_use", "id": b.id, "name": b.name, "input": b.input})
            elif b.type == "thinking":
                block = {"type": "thinking", "thinking": b.thinking, "signature": b.signature}
                native.append(block)
                blocks.append(block)
            elif b.type == "redacted_thinking":
                block = {"type": "redacted_thinking", "data": b.data}
                native.append(block)
                blocks.append(block)
        self.messages.append({"role": "assistant", "content": blocks})
        u = msg.usage
        read = u.cache_read_input_tokens or 0
        written = u.cache_creation_input_tokens or 0
        return Call(
            call_id, session, mode, diverged,
            {"input_tokens": u.input_tokens + read + written,
             "cached_input_tokens": u.cache_read_input_tokens, "output_tokens": u.output_tokens},
            text, made, native,
        )

    @staticmethod
    def conversation(body: dict) -> list:
        """Without `cache_control` marks: Loom moves the breakpoint to the newest block on every
        call, as Anthropic advises, and the cache is keyed by the blocks, not by the marks."""
        head = [{"system": body["system"]}] if "system" in body else []
        return _unmarked(head + list(body.get("messages", [])))


def _unmarked(value):
    if isinstance(value, dict):
        return {k: _unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_unmarked(v) for v in value]
    return value


class _Usage:
    def __init__(self):
        self.input_tokens = 0
        self.output_tokens = 0
        self.cache_read_input_tokens = None
        self.cache_creation_input_tokens = None


class _Block:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class _Message:
    def __init__(self):
        self.content: list = []
        self.usage = _Usage()


def _assemble_anthropic(events) -> _Message:
    """The message of a raw `create(stream=True)` stream, from its events, as a client would."""
    msg = _Message()
    partial: dict[int, str] = {}
    stopped = False
    for ev in events:
        if ev.type == "message_start":
            u = ev.message.usage
            msg.usage.input_tokens = u.input_tokens
            msg.usage.output_tokens = u.output_tokens
            msg.usage.cache_read_input_tokens = u.cache_read_input_tokens
            msg.usage.cache_creation_input_tokens = u.cache_creation_input_tokens
        elif ev.type == "content_block_start":
            cb = ev.content_block
            if cb.type == "text":
                block = _Block(type="text", text=cb.text)
            elif cb.type == "tool_use":
                block = _Block(type="tool_use", id=cb.id, name=cb.name, input={})
                partial[ev.index] = ""
            elif cb.type == "thinking":
                block = _Block(type="thinking", thinking=cb.thinking, signature=cb.signature or "")
            else:
                block = _Block(type=cb.type, data=getattr(cb, "data", None))
            while len(msg.content) <= ev.index:
                msg.content.append(None)
            msg.content[ev.index] = block
        elif ev.type == "content_block_delta":
            block = msg.content[ev.index]
            d = ev.delta
            if d.type == "text_delta":
                block.text += d.text
            elif d.type == "input_json_delta":
                partial[ev.index] += d.partial_json
            elif d.type == "thinking_delta":
                block.thinking += d.thinking
            elif d.type == "signature_delta":
                block.signature += d.signature
        elif ev.type == "content_block_stop":
            if ev.index in partial:
                text = partial.pop(ev.index)
                msg.content[ev.index].input = json.loads(text) if text else {}
        elif ev.type == "message_delta":
            u = ev.usage
            msg.usage.output_tokens = u.output_tokens
            for name in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
                value = getattr(u, name, None)
                if value is not None:
                    setattr(msg.usage, name, value)
        elif ev.type == "message_stop":
            stopped = True
    assert stopped, "the stream ended without message_stop"
    msg.content = [b for b in msg.content if b is not None]
    return msg


def text_of(content) -> str:
    """The text of an event's `content`: a string, or the text parts of a list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")


def normalise(event: dict) -> dict:
    """A logged event in the form a driver's `expected` uses."""
    kind = event.get("kind")
    if kind in ("system", "user"):
        return {"kind": kind, "text": text_of(event.get("content"))}
    if kind == "assistant":
        out = {
            "kind": kind,
            "text": text_of(event.get("content")),
            "calls": [(c["id"], c["name"], parse_args(c["arguments"])) for c in event.get("tool_calls", [])],
        }
        native = (event.get("native") or {}).get("items")
        if native:
            out["native"] = native
        return out
    if kind == "tool_result":
        content = event.get("content") or {}
        out = {"kind": kind, "call_id": event.get("call_id"), "sha256": (event.get("stats") or {}).get("sha256")}
        if "text" in content:
            out["text"] = content["text"]
        elif "parts" in content:
            out["text"] = text_of(content["parts"])
        return out
    return {"kind": kind, "event": event}


def _matches(expected: dict, logged: dict) -> bool:
    if expected["kind"] == "tool_result":
        same = expected["call_id"] == logged.get("call_id") and expected["sha256"] == logged.get("sha256")
        return same and ("text" not in logged or logged["text"] == expected["text"])
    if expected["kind"] == "assistant":
        base = (expected["text"], expected["calls"]) == (logged.get("text"), logged.get("calls"))
        if "native" in expected:
            return base and _native_matches(expected["native"], logged.get("native"))
        return base
    return expected == logged


def _native_matches(expected: list, logged: list | None) -> bool:
    """Reasoning items as the provider sent them: every field the client saw, unchanged."""
    if logged is None or len(logged) != len(expected):
        return False
    for e, l in zip(expected, logged):
        for k, v in e.items():
            if k in ("status",) and k not in l:
                continue
            if l.get(k) != v:
                return False
    return True


def log_mismatch(expected: list[dict], events: list[dict]) -> str | None:
    """Where the log departs from the expected events, or None when it holds exactly them."""
    logged = [normalise(e) for e in events]
    seqs = [e.get("seq") for e in events]
    if seqs != list(range(1, len(events) + 1)):
        return f"seqs are not 1..{len(events)}: {seqs}"
    for i, (e, l) in enumerate(zip(expected, logged)):
        if not _matches(e, l):
            return f"event {i + 1}: expected {e}\n  logged {l}"
    if len(expected) != len(logged):
        extra = logged[len(expected):] or expected[len(logged):]
        return f"{len(logged)} events logged, {len(expected)} expected; first difference: {extra[0]}"
    return None


def chat_orphans(messages: list[dict]) -> list[str]:
    """Unpaired tool calls or results in a rendered Chat request."""
    problems, open_calls = [], set()
    for i, m in enumerate(messages):
        role = m.get("role")
        if role == "tool":
            cid = m.get("tool_call_id")
            if cid not in open_calls:
                problems.append(f"message {i}: tool result {cid} answers no open call")
            open_calls.discard(cid)
            continue
        if open_calls:
            problems.append(f"message {i}: calls {sorted(open_calls)} have no result before it")
            open_calls = set()
        if role == "assistant":
            open_calls = {c["id"] for c in m.get("tool_calls") or []}
    if open_calls:
        problems.append(f"the request ends with calls {sorted(open_calls)} unanswered")
    return problems


def anthropic_orphans(messages: list[dict]) -> list[str]:
    """Unpaired tool_use / tool_result blocks in a rendered Messages request."""
    problems, open_calls = [], set()
    for i, m in enumerate(messages):
        blocks = m.get("content") if isinstance(m.get("content"), list) else []
        if m.get("role") == "user":
            answered = {b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"}
            if answered - open_calls:
                problems.append(f"message {i}: results {sorted(answered - open_calls)} answer no call")
            if open_calls - answered:
                problems.append(f"message {i}: calls {sorted(open_calls - answered)} have no result")
            open_calls = set()
        elif m.get("role") == "assistant":
            if open_calls:
                problems.append(f"message {i}: calls {sorted(open_calls)} have no result")
            open_calls = {b.get("id") for b in blocks if b.get("type") == "tool_use"}
    if open_calls:
        problems.append(f"the request ends with calls {sorted(open_calls)} unanswered")
    return problems


def check_usage(receipt: dict, call: Call) -> None:
    """The receipt's usage is what the provider reported to the client."""
    got = receipt.get("usage") or {}
    want = call.usage
    assert got.get("input_tokens") == want["input_tokens"], f"call {call.call_id}: usage {got}, reply said {want}"
    assert got.get("output_tokens") == want["output_tokens"], f"call {call.call_id}: usage {got}, reply said {want}"
    assert got.get("cached_input_tokens") == want["cached_input_tokens"], (
        f"call {call.call_id}: usage {got}, reply said {want}"
    )


def check_session(loom, driver: Driver, mode: str | None) -> list[dict]:
    """The calls stayed in the driver's session, its log holds exactly the conversation, once and
    in order, and each call's receipt has the usage the reply reported. Returns the receipts."""
    for c in driver.calls:
        assert c.session == driver.session, f"call {c.call_id} landed in session {c.session}"
        assert c.diverged is None, f"call {c.call_id}: X-Loom-Diverged {c.diverged}"
        assert c.call_id is not None, "a reply without X-Loom-Call"
        if mode:
            assert c.mode == mode, f"call {c.call_id}: X-Loom-Mode {c.mode}, asked for {mode}"
    mismatch = log_mismatch(driver.expected, loom.events(driver.session))
    assert mismatch is None, mismatch
    receipts = loom.receipts(driver.session)
    by_id = {r["id"]: r for r in receipts}
    received = {c.call_id for c in driver.calls}
    assert received <= set(by_id), f"receipts {sorted(by_id)} for calls {sorted(received)}"
    unanswered = [r for r in receipts if r["id"] not in received]
    assert len(unanswered) == driver.failed, (
        f"{len(unanswered)} receipts of calls the client never received, {driver.failed} calls failed"
    )
    assert all(r.get("usage") is None for r in unanswered), f"usage on a failed call: {unanswered}"
    for c in driver.calls:
        check_usage(by_id[c.call_id], c)
    return [by_id[c.call_id] for c in driver.calls]
