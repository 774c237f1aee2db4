"""Streamed calls through `loom.wrap`: one stream to the caller out of every round's, as `loom
serve` splices them (crates/loom-server/src/proxy/splice.rs).

Events pass as they arrive until the reply's first tool call; from there the round's events are
held, since only its end tells whether the reply calls ``loom_recall``. When it does not, the held
events follow. When it does, they are dropped, the call is answered (a hidden round in the log)
and the model asked again, streamed, and the next round's events continue the same stream: no
second ``message_start`` or ``response.created``, blocks, items and calls numbered after those
the caller has, ``sequence_number`` running on, ``response.completed`` listing every item the
caller received. When the rounds run out, the held events follow without the ``loom_recall``
calls. The reply the caller assembled is what is logged.

Events are the SDK's own objects, changed in place where they are renumbered.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Iterator, List, Optional, Set

RECALL = "loom_recall"


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _dump(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):
        return obj.model_dump(exclude_none=True, mode="json")
    return obj


class Assembler:
    """A reply's body, as the provider would have sent it whole, from its stream's events."""

    def __init__(self, api: str) -> None:
        self.api = api
        # Chat Completions.
        self.id: Optional[str] = None
        self.text: List[str] = []
        self.calls: Dict[int, Dict[str, Any]] = {}
        self.finish: Optional[str] = None
        self.usage: Any = None
        # Messages.
        self.message: Dict[str, Any] = {}
        self.blocks: Dict[int, Dict[str, Any]] = {}
        self.partial: Dict[int, str] = {}
        # Responses.
        self.response: Optional[Dict[str, Any]] = None

    def push(self, event: Any) -> None:
        if self.api == "chat":
            self.id = self.id or _get(event, "id")
            if _get(event, "usage") is not None:
                self.usage = _dump(event.usage)
            for choice in _get(event, "choices") or []:
                delta = choice.delta
                if _get(delta, "content"):
                    self.text.append(delta.content)
                for tc in _get(delta, "tool_calls") or []:
                    slot = self.calls.setdefault(
                        tc.index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
                    if tc.id:
                        slot["id"] = tc.id
                    if tc.function is not None:
                        slot["function"]["name"] += tc.function.name or ""
                        slot["function"]["arguments"] += tc.function.arguments or ""
                if _get(choice, "finish_reason"):
                    self.finish = choice.finish_reason
        elif self.api == "messages":
            kind = _get(event, "type")
            if kind == "message_start":
                self.message = _dump(event.message)
            elif kind == "content_block_start":
                self.blocks[event.index] = _dump(event.content_block)
            elif kind == "content_block_delta":
                block, d = self.blocks.get(event.index), event.delta
                if block is None:
                    return
                if d.type == "text_delta":
                    block["text"] = block.get("text", "") + d.text
                elif d.type == "input_json_delta":
                    self.partial[event.index] = self.partial.get(event.index, "") + d.partial_json
                elif d.type == "thinking_delta":
                    block["thinking"] = block.get("thinking", "") + d.thinking
                elif d.type == "signature_delta":
                    block["signature"] = block.get("signature", "") + d.signature
            elif kind == "content_block_stop":
                if event.index in self.partial:
                    text = self.partial.pop(event.index)
                    self.blocks[event.index]["input"] = json.loads(text) if text else {}
            elif kind == "message_delta":
                delta = _dump(event.delta)
                self.message.update({k: v for k, v in delta.items() if v is not None})
                usage = dict(self.message.get("usage") or {})
                usage.update({k: v for k, v in (_dump(event.usage) or {}).items() if v is not None})
                self.message["usage"] = usage
        else:
            if _get(event, "type") in ("response.completed", "response.incomplete", "response.failed"):
                self.response = _dump(event.response)

    def body(self) -> Dict[str, Any]:
        """The reply as its whole body (what `Session.recall_round` and the log read)."""
        if self.api == "chat":
            message: Dict[str, Any] = {"role": "assistant", "content": "".join(self.text) or None}
            if self.calls:
                message["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
            body: Dict[str, Any] = {"id": self.id or "chatcmpl-loom", "object": "chat.completion",
                                    "choices": [{"index": 0, "message": message,
                                                 "finish_reason": self.finish or "stop"}]}
            if self.usage is not None:
                body["usage"] = self.usage
            return body
        if self.api == "messages":
            return {**self.message, "content": [self.blocks[i] for i in sorted(self.blocks)]}
        return self.response or {"output": []}

    def calls_recall(self) -> bool:
        body = self.body()
        if self.api == "chat":
            calls = body["choices"][0]["message"].get("tool_calls") or []
            return any(c["function"]["name"] == RECALL for c in calls)
        if self.api == "messages":
            return any(b.get("type") == "tool_use" and b.get("name") == RECALL for b in body["content"])
        return any(i.get("type") == "function_call" and i.get("name") == RECALL for i in body.get("output", []))


def _opens_a_call(api: str, event: Any) -> bool:
    if api == "messages":
        return _get(event, "type") == "content_block_start" and event.content_block.type == "tool_use"
    if api == "responses":
        return (_get(event, "type") == "response.output_item.added"
                and _get(event.item, "type") in ("function_call", "custom_tool_call"))
    return any(_get(c.delta, "tool_calls") for c in _get(event, "choices") or [])


def _calls_in(api: str, held: List[Any]) -> tuple:
    """The upstream numbers of the held reply's tool calls, and of those calling loom_recall."""
    every: Set[int] = set()
    recall: Set[int] = set()
    for event in held:
        if api == "messages":
            if _get(event, "type") == "content_block_start" and event.content_block.type == "tool_use":
                every.add(event.index)
                if event.content_block.name == RECALL:
                    recall.add(event.index)
        elif api == "responses":
            if (_get(event, "type") == "response.output_item.added"
                    and _get(event.item, "type") in ("function_call", "custom_tool_call")):
                every.add(event.output_index)
                if _get(event.item, "name") == RECALL:
                    recall.add(event.output_index)
        else:
            for choice in _get(event, "choices") or []:
                for tc in _get(choice.delta, "tool_calls") or []:
                    if tc.function is not None and tc.function.name:
                        every.add(tc.index)
                        if tc.function.name == RECALL:
                            recall.add(tc.index)
    return every, recall


class Splice:
    """One stream to the caller out of every round's (see the module's docs)."""

    def __init__(self, api: str) -> None:
        self.api = api
        self.round = 1
        self.base = 0
        self.given = 0
        self.seq = 0
        self.first_id: Optional[str] = None
        self.items: List[tuple] = []
        self.held: List[Any] = []
        self.holding = False
        self.stop_instead = False

    def take(self, event: Any) -> List[Any]:
        if not self.holding and _opens_a_call(self.api, event):
            self.holding = True
        if self.holding:
            self.held.append(event)
            return []
        out = self._rewrite(event, set())
        return [] if out is None else [out]

    def settle(self, drop_recall: bool) -> List[Any]:
        held, self.held, self.holding = self.held, [], False
        every, recall = _calls_in(self.api, held)
        drops = recall if drop_recall else set()
        self.stop_instead = bool(drops) and every == drops
        out = [self._rewrite(e, drops) for e in held]
        return [e for e in out if e is not None]

    def next_round(self) -> None:
        self.held, self.holding = [], False
        self.round += 1
        self.base = self.given

    def _number(self, index: int, drops: Set[int]) -> Optional[int]:
        if index in drops:
            return None
        n = self.base + index - sum(1 for d in drops if d < index)
        self.given = max(self.given, n + 1)
        return n

    def _rewrite(self, event: Any, drops: Set[int]) -> Any:
        kind = _get(event, "type")
        if self.api == "messages":
            if kind == "message_start" and self.round > 1:
                return None
            if kind in ("content_block_start", "content_block_delta", "content_block_stop"):
                n = self._number(event.index, drops)
                if n is None:
                    return None
                event.index = n
            if kind == "message_delta" and self.stop_instead and _get(event.delta, "stop_reason") == "tool_use":
                event.delta.stop_reason = "end_turn"
            return event
        if self.api == "chat":
            if self.first_id is None:
                self.first_id = _get(event, "id")
            elif _get(event, "id") is not None:
                event.id = self.first_id
            for choice in _get(event, "choices") or []:
                calls = _get(choice.delta, "tool_calls")
                if calls:
                    kept = []
                    for tc in calls:
                        n = self._number(tc.index, drops)
                        if n is not None:
                            tc.index = n
                            kept.append(tc)
                    choice.delta.tool_calls = kept or None
                if self.stop_instead and _get(choice, "finish_reason") == "tool_calls":
                    choice.finish_reason = "stop"
            return event
        # Responses.
        if kind in ("response.created", "response.in_progress", "response.queued"):
            if self.round > 1:
                return None
            if self.first_id is None:
                self.first_id = _get(event.response, "id")
        # A reply of one round, all of it passed on, closes as the provider closed it.
        if kind in ("response.completed", "response.incomplete", "response.failed") and (self.round > 1 or drops):
            self.items.sort(key=lambda p: p[0])
            event.response.output = [item for _, item in self.items]
            if self.first_id is not None:
                event.response.id = self.first_id
        index = _get(event, "output_index")
        if index is not None:
            n = self._number(index, drops)
            if n is None:
                return None
            event.output_index = n
            if kind == "response.output_item.done":
                self.items.append((n, event.item))
        if _get(event, "sequence_number") is not None:
            event.sequence_number = self.seq
            self.seq += 1
        return event


def spliced(api: str, first: Iterator[Any], again, max_rounds: int, finished) -> Iterator[Any]:
    """The caller's stream: ``first`` is the first round's events; ``again(body)`` answers the
    round's ``loom_recall`` calls (its whole body, as `Session.recall_round` takes it) and returns
    the next round's events; ``finished(body, usage_body)`` logs the reply the caller assembled
    (``usage_body`` is the last round's, whose usage the call records)."""
    splice = Splice(api)
    seen = Assembler(api)
    events = first
    rounds = 0
    while True:
        upstream = Assembler(api)
        for event in events:
            upstream.push(event)
            for out in splice.take(event):
                seen.push(out)
                yield out
        calls = upstream.calls_recall()
        if calls and rounds < max_rounds:
            rounds += 1
            splice.next_round()
            events = again(upstream.body())
            continue
        for out in splice.settle(calls):
            seen.push(out)
            yield out
        finished(seen.body(), upstream.body())
        return
