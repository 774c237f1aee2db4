"""LangChain: a chat message history kept in Loom, an exact token counter, and an agent
middleware that sends the model Loom's render instead of the whole conversation.

    from loom.langchain import LoomChatMessageHistory, LoomContextMiddleware, token_counter

    history = LoomChatMessageHistory("run-1", db=db, model="gpt-4o", budget=16_000)
    trim_messages(messages, max_tokens=16_000, token_counter=token_counter("gpt-4o"))
    agent = create_agent(model, tools, middleware=[LoomContextMiddleware(db, model="gpt-4o", budget=16_000)])

Messages cross in OpenAI Chat form (``convert_to_openai_messages`` / ``convert_to_messages``),
which is how Loom reads and writes them.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage, convert_to_messages, convert_to_openai_messages

from . import Database, count_request
from .agents import _latest_fork, _new_fork

try:  # The middleware needs `langchain` (v1) itself; the rest only langchain-core.
    from langchain.agents.middleware import AgentMiddleware as _Middleware
except ImportError:  # pragma: no cover - exercised only without langchain
    _Middleware = object  # type: ignore[assignment,misc]


def _openai(messages: Sequence[BaseMessage]) -> List[dict]:
    converted = convert_to_openai_messages(list(messages))
    return converted if isinstance(converted, list) else [converted]


def token_counter(messages: Any = "gpt-4o") -> Any:
    """An exact ``token_counter`` for ``trim_messages``: the messages as one OpenAI Chat
    request, counted as Loom counts a render (content, tool calls and their arguments, names,
    and the format's framing).

    Pass it as it is (``token_counter=token_counter``: counted for ``gpt-4o``), or call it with a
    model name for another model's tokenizer (``token_counter=token_counter("gpt-4.1")``)."""
    if isinstance(messages, str):
        model = messages
        return lambda msgs: count_request({"messages": _openai(msgs)}, model, "openai-chat")
    return count_request({"messages": _openai(messages)}, "gpt-4o", "openai-chat")


class LoomChatMessageHistory(BaseChatMessageHistory):
    """A LangChain ``BaseChatMessageHistory`` whose messages live in a Loom session.

    ``messages`` is what Loom renders for the next call: the whole history when it fits
    ``budget`` (the model's window without one), fitted to it otherwise, with large tool outputs
    replaced by references. ``add_messages`` appends only the new messages; ``clear`` continues
    the conversation in a fresh fork (Loom's log is never rewritten)."""

    def __init__(
        self,
        session_id: str,
        db: Database,
        model: str = "gpt-4o",
        budget: Optional[int] = None,
        agent: Optional[str] = None,
    ) -> None:
        self.session_id = session_id
        self.db = db
        self.model = model
        self.budget = budget
        self.agent = agent
        self._log = _latest_fork(db, session_id)
        self.last_receipt: Optional[dict] = None

    @property
    def messages(self) -> List[BaseMessage]:  # type: ignore[override]
        log = self.db.session(self._log)
        if not log.exists() or log.info["event_count"] == 0:
            return []
        rendered = log.render(model=self.model, budget=self.budget, format="openai-chat")
        self.last_receipt = rendered.receipt
        return convert_to_messages(rendered.body["messages"])

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        if not messages:
            return
        self.db.session(self._log).append_history(_openai(messages), "openai", self.agent)

    def clear(self) -> None:
        self._log = _new_fork(self.db, self.session_id, self.agent).id


class LoomContextMiddleware(_Middleware):  # type: ignore[misc,valid-type]
    """An agent middleware (``create_agent(..., middleware=[...])``) that logs the
    conversation in a Loom session and replaces the model's messages with Loom's render, fitted
    to ``budget`` and cache-stable between compaction points. The session is ``session`` or,
    without one, the run's thread id from the runtime's config, or ``"langchain"``."""

    def __init__(
        self,
        db: Database,
        model: str = "gpt-4o",
        budget: Optional[int] = None,
        session: Optional[str] = None,
    ) -> None:
        super().__init__()
        self.db = db
        self.model = model
        self.budget = budget
        self.session = session
        self.last_receipt: Optional[dict] = None

    def _session_id(self, request: Any) -> str:
        if self.session:
            return self.session
        config = getattr(getattr(request, "runtime", None), "config", None) or {}
        thread = (config.get("configurable") or {}).get("thread_id") if isinstance(config, dict) else None
        return str(thread) if thread else "langchain"

    def _fitted(self, request: Any) -> Any:
        history = []
        system = getattr(request, "system_message", None)
        if system is not None:
            history.extend(_openai([system]))
        history.extend(_openai(request.messages))
        log = self.db.import_history(history, format="openai", session=self._session_id(request))
        tools = [_tool_spec(t) for t in (request.tools or [])]
        rendered = log.render(
            model=self.model,
            budget=self.budget,
            format="openai-chat",
            tools=[t for t in tools if t is not None] or None,
        )
        self.last_receipt = rendered.receipt
        messages = convert_to_messages(rendered.body["messages"])
        # The system message stays the request's own (the render keeps it first, unchanged).
        if system is not None and messages and messages[0].type == "system":
            messages = messages[1:]
        return request.override(messages=messages)

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return handler(self._fitted(request))

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return await handler(self._fitted(request))


def _tool_spec(tool: Any) -> Optional[dict]:
    """A tool as an OpenAI function definition, so that the render budgets it."""
    if isinstance(tool, dict):
        return tool
    try:
        from langchain_core.utils.function_calling import convert_to_openai_tool

        return convert_to_openai_tool(tool)
    except Exception:  # noqa: BLE001 - a tool LangChain cannot describe is left out of the budget
        return None


__all__ = ["LoomChatMessageHistory", "LoomContextMiddleware", "token_counter"]
