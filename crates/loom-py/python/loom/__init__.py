"""Loom, the context engine for LLM agents, in-process.

    import loom

    db = loom.open("loom.db")                       # or "postgres://user@host:5432/db"
    db.import_history(messages, format="openai", session="run-1")
    rendered = db.session("run-1").render(model="gpt-4o", budget=16_000)
    client.chat.completions.create(**rendered.body)  # budget-fitted, cache-stable

Everything is Loom's engine itself (the Rust library `loom serve` and the CLI run), called
without a server: the same log, renders, receipts and references. `loom.connect(URL)` gives the
same interface over a running `loom serve`.

Errors are exceptions under :class:`LoomError`, one class per kind, each with ``record``,
``field`` and ``reason`` attributes; nothing stored changes when one is raised.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import _loom
from ._loom import (
    Conflict,
    InvalidEvent,
    InvalidInput,
    LoomError,
    NotFound,
    SessionNotFound,
    StorageError,
    Unavailable,
)

__version__: str = _loom.__version__

__all__ = [
    "open",
    "recall_tool",
    "connect",
    "wrap",
    "count_tokens",
    "count_request",
    "Database",
    "Session",
    "Rendered",
    "LoomError",
    "InvalidInput",
    "InvalidEvent",
    "NotFound",
    "SessionNotFound",
    "Conflict",
    "Unavailable",
    "StorageError",
]

#: The input formats :meth:`Database.import_history` reads.
HISTORY_FORMATS = ("openai", "anthropic", "responses")
#: The request formats :meth:`Session.render` writes.
RENDER_FORMATS = ("openai-chat", "openai-responses", "anthropic", "react")


class Rendered:
    """A rendered request: ``body`` is ready for the provider's SDK (``create(**body)`` after
    adding ``model``), ``receipt`` says what was included, stubbed, folded, summarised or
    dropped and why, ``model_call`` is the id of the call recorded for it (None when the log has
    not changed since the last render, which is then not recorded again), ``text`` is the body
    as the JSON text Loom wrote (the bytes `loom replay --emit-requests` and the HTTP API send
    for the same render).

    ``text`` and ``receipt`` are written when first asked for: most calls need only the body."""

    __slots__ = ("body", "model_call", "_texts", "_text", "_receipt")

    def __init__(self, body: Dict[str, Any], texts: Any, model_call: Optional[int] = None) -> None:
        self.body = body
        self.model_call = model_call
        # Anything with `body()` and `receipt()` returning JSON text.
        self._texts = texts
        self._text: Optional[str] = None
        self._receipt: Optional[Dict[str, Any]] = None

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = self._texts.body()
        return self._text

    @property
    def receipt(self) -> Dict[str, Any]:
        if self._receipt is None:
            self._receipt = json.loads(self._texts.receipt())
        return self._receipt

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Rendered):
            return NotImplemented
        return (self.body, self.receipt, self.model_call) == (
            other.body,
            other.receipt,
            other.model_call,
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Rendered(model_call={self.model_call!r}, body={self.body!r})"


def _history_body(
    messages: Union[Sequence[Mapping[str, Any]], Mapping[str, Any]],
    format: str,
    system: Optional[Any],
) -> str:
    if format not in HISTORY_FORMATS:
        raise InvalidInput(
            f"format: `{format}`: expected one of {', '.join(HISTORY_FORMATS)}"
        )
    if isinstance(messages, Mapping):
        # A whole request body, as the provider takes it.
        return json.dumps(messages)
    items = list(messages)
    if format == "responses":
        body: Dict[str, Any] = {"input": items}
        if system is not None:
            body["instructions"] = system
    else:
        body = {"messages": items}
        if system is not None:
            if format == "anthropic":
                body["system"] = system
            else:
                body["messages"] = [{"role": "system", "content": system}] + items
    return json.dumps(body)


@dataclass
class _Handed:
    key: Tuple[str, Any]
    items: List[Any]
    events: int


class Session:
    """One session of a :class:`Database`: its log, renders and receipts."""

    def __init__(self, db: "Database", id: str) -> None:
        self._db = db
        self.id = id

    def __repr__(self) -> str:
        return f"Session({self.id!r})"

    @property
    def info(self) -> Dict[str, Any]:
        """The session's record (id, agent, parent, created_ms, event_count)."""
        found = self._db._native.session_info(self.id)
        if found is None:
            raise SessionNotFound(f"session `{self.id}` not found")
        return _session_record(json.loads(found))

    def exists(self) -> bool:
        return self._db._native.session_info(self.id) is not None

    def append(self, events: Iterable[Mapping[str, Any]]) -> Tuple[int, int]:
        """Appends events in Loom's JSON form (docs/formats.md: ``{"kind": "user", "content":
        ..., "ts_ms": ...}``; ``ts_ms`` defaults to now); returns the first and last seq given.
        A batch that breaks a rule is refused whole (:class:`InvalidEvent`)."""
        batch = [dict(e) for e in events]
        now = _now_ms()
        for event in batch:
            event.setdefault("ts_ms", now)
        return self._db._native.append(self.id, json.dumps(batch))

    def append_history(
        self,
        items: Sequence[Mapping[str, Any]],
        format: str = "openai",
        agent: Optional[str] = None,
    ) -> Tuple[int, int]:
        """Appends the next messages (``"openai"``, ``"anthropic"``) or items (``"responses"``)
        of a provider history: only the new ones, as an agent framework hands them over; a tool
        result may answer a call already in the log. Creates the session when it does not exist.
        Returns the first and last seq given (``(n + 1, n)`` when they hold no event)."""
        if format not in HISTORY_FORMATS:
            raise InvalidInput(f"format: `{format}`: expected one of {', '.join(HISTORY_FORMATS)}")
        key = "input" if format == "responses" else "messages"
        body = json.dumps({key: [dict(i) for i in items]})
        return self._db._native.append_history(self.id, body, format, agent)

    def events(self, first: int = 1, last: Optional[int] = None) -> List[Dict[str, Any]]:
        """The log's events ``first..=last`` (to the end by default)."""
        end = last if last is not None else 2**63 - 1
        return json.loads(self._db._native.read(self.id, first, end))

    def render(
        self,
        model: str,
        budget: Optional[int] = None,
        format: str = "openai-chat",
        tools: Optional[Sequence[Mapping[str, Any]]] = None,
        recall: bool = False,
    ) -> Rendered:
        """Renders the session for ``model`` within ``budget`` input tokens (the model's window
        less its response reserve when None), in ``format``, with ``tools`` (the provider's tool
        definitions) budgeted with it. With ``recall``, the ``loom_recall`` tool is counted too
        (the caller offers it: :func:`recall_tool`) and every stub says how to call it."""
        tools_json = json.dumps(list(tools)) if tools is not None else None
        body, texts, call = self._db._native.render(self.id, model, budget, format, tools_json, recall)
        return Rendered(body, texts, call)

    def recall_round(self, reply: Mapping[str, Any], format: str, model: str, budget: Optional[int] = None) -> bool:
        """Answers the ``loom_recall`` calls of a provider reply (its JSON body in ``format``:
        ``openai-chat``, ``anthropic`` or ``openai-responses``) and logs them as Loom's own hidden
        round, with the same answers ``loom serve`` gives. False when the reply calls none."""
        return self._db._native.recall_round(self.id, json.dumps(dict(reply)), format, model, budget)

    def explain(self, seq: int) -> Dict[str, Any]:
        """What happened to event ``seq`` in each recorded model call, and where its original is."""
        return json.loads(self._db._native.explain(self.id, seq))

    def report_usage(
        self,
        call: int,
        input_tokens: int,
        cached_input_tokens: Optional[int] = None,
        output_tokens: Optional[int] = None,
    ) -> Dict[str, Any]:
        """Records what the provider said model call ``call`` used (the same figures again change
        nothing; other figures raise :class:`Conflict`: the first report stands)."""
        return _call_record(
            json.loads(
                self._db._native.report_usage(
                    self.id, call, input_tokens, cached_input_tokens, output_tokens
                )
            )
        )

    def model_calls(self) -> List[Dict[str, Any]]:
        """Every recorded model call: ``{"id", "session", "at_seq", "created_ms", "receipt",
        "usage"}``, as the HTTP API shows them."""
        return [_call_record(c) for c in json.loads(self._db._native.model_calls(self.id))]

    def recall(self, reference: str) -> bytes:
        """The original bytes of an output a render replaced by a reference."""
        return self._db.recall(reference, session=self.id)

    def memory_search(
        self,
        query: str,
        tier: Optional[str] = None,
        budget: int = 1000,
        limit: Optional[int] = None,
        agent: Optional[str] = None,
        from_ms: Optional[int] = None,
        to_ms: Optional[int] = None,
    ) -> List[Dict[str, Any]]:
        """The session's agent's memories best matching ``query``, best first, whose ``tokens``
        sum to at most ``budget`` (and, when ``limit`` is given, at most that many hits; by
        default the budget alone decides): this session's notes (L2) and summaries (L3) with long-term
        memory (L4) across sessions, or one ``tier`` (``"L1"`` the session's recent events,
        ``"L2"``, ``"L3"``, ``"L4"``). Each hit is ``{"text", "tokens", "score", "tier",
        "sources": [{"session", "seq"}]}`` (and ``"id"`` for stored items). ``from_ms`` and
        ``to_ms`` (UTC milliseconds) keep the stored items valid within that time range."""
        return self._db.memory_search(
            query,
            agent=agent,
            session=self.id,
            tier=tier,
            budget=budget,
            limit=limit,
            from_ms=from_ms,
            to_ms=to_ms,
        )

    def memory_save(
        self, text: str, ttl_seconds: Optional[int] = None, seq: Optional[int] = None
    ) -> Dict[str, Any]:
        """Saves a note into this session's working memory (L2) for its agent, pointing at
        event ``seq`` (the last one by default), expiring after ``ttl_seconds`` when given (an
        expired note is never returned). Returns ``{"id", "created", "expires_ms"}``."""
        return json.loads(self._db._native.memory_save(self.id, text, ttl_seconds, seq))


class Database:
    """An open Loom database. Safe to share across threads; the GIL is released while Loom
    reads, writes, renders or counts."""

    def __init__(self, native: Any, location: str) -> None:
        self._native = native
        self.location = location
        # What this handle last handed over per session, for `import_history` to send only
        # what is new next time.
        self._handed: Dict[str, "_Handed"] = {}

    def __repr__(self) -> str:
        return f"loom.open({self.location!r})"

    def session(self, id: str) -> Session:
        """The session ``id`` (it need not exist yet: :meth:`create_session` or
        :meth:`import_history` make it)."""
        return Session(self, id)

    def create_session(self, id: str, agent: Optional[str] = None) -> Session:
        """Creates an empty session (:class:`Conflict` when it exists)."""
        self._native.create_session(id, agent)
        return Session(self, id)

    def delete_session(self, id: str) -> Dict[str, Any]:
        """Deletes session ``id``: its log, receipts, summaries, steps and aliases, and the
        memory items only it gave (``loom serve`` also removes its saved outputs). Returns what
        was removed (``events``, ``memory_items_forgotten``, ``files_removed``);
        :class:`SessionNotFound` when there is no such session."""
        return json.loads(self._native.delete_session(id))

    def sessions(self) -> List[Dict[str, Any]]:
        """Every session's record, ordered by id."""
        return [_session_record(s) for s in json.loads(self._native.sessions())]

    def import_history(
        self,
        messages: Union[Sequence[Mapping[str, Any]], Mapping[str, Any]],
        format: str = "openai",
        session: Optional[str] = None,
        agent: Optional[str] = None,
        system: Optional[Any] = None,
    ) -> Session:
        """Imports a provider history into ``session``: a list of OpenAI Chat messages
        (``format="openai"``), Anthropic messages (``"anthropic"``, with ``system=``) or OpenAI
        Responses input items (``"responses"``), or a whole request body. An existing session
        whose log the history extends gets the rest appended."""
        if session is None:
            raise InvalidInput("session: name the session to import into")
        items = None if isinstance(messages, Mapping) else list(messages)
        if items is not None and self._continue(session, items, format, system, agent):
            return Session(self, session)
        body = _history_body(messages, format, system)
        self._native.import_history(body, format, session, agent)
        if items is not None:
            info = self._native.session_info(session)
            count = json.loads(info)["event_count"] if info else 0
            self._handed[session] = _Handed((format, system), json.loads(json.dumps(items)), count)
        return Session(self, session)

    def _continue(self, session: str, items: List[Any], format: str, system: Any, agent: Optional[str]) -> bool:
        """Hands over only what is new when this handle gave the session the same history's
        beginning last time and nothing else wrote to it since: linear in what is new instead of
        reading the whole history again. False when it cannot (the history departs, another
        writer moved the log on, or the new part does not stand alone), and nothing was written."""
        handed = self._handed.get(session)
        if handed is None or handed.key != (format, system):
            return False
        done = len(handed.items)
        if done > len(items) or items[:done] != handed.items:
            return False
        info = self._native.session_info(session)
        if info is None or json.loads(info)["event_count"] != handed.events:
            return False
        new = items[done:]
        if new:
            key = "input" if format == "responses" else "messages"
            text = json.dumps({key: new})
            try:
                first, last = self._native.append_history(session, text, format, agent)
            except LoomError:
                # A part that needs the whole history to be read (a reused call id, which the
                # importer renames by looking at every call before it): the long way.
                return False
            # A copy (the caller may change its dicts later), read back from the text already
            # written: much cheaper than `copy.deepcopy`.
            handed.items.extend(json.loads(text)[key])
            handed.events = last
        return True

    def memory_search(
        self,
        query: str,
        agent: Optional[str] = None,
        session: Optional[str] = None,
        tier: Optional[str] = None,
        budget: int = 1000,
        limit: Optional[int] = None,
        from_ms: Optional[int] = None,
        to_ms: Optional[int] = None,
    ) -> List[Dict[str, Any]]:
        """An agent's memories best matching ``query`` (see :meth:`Session.memory_search`);
        ``agent`` defaults to ``session``'s. Returns the hits, best first."""
        out = self._native.memory_search(
            query, agent, session, tier, budget, limit, from_ms, to_ms
        )
        return json.loads(out)["hits"]

    def recall(self, reference: str, session: Optional[str] = None) -> bytes:
        """The original bytes a reference names: ``sha256:<hex>``, or an alias such as
        ``outputs/bash_003.txt`` within ``session``."""
        return self._native.recall(reference, session)


def recall_tool() -> Dict[str, Any]:
    """The ``loom_recall`` tool: ``{"name", "description", "parameters"}``, the same in every
    front end (``loom serve``, ``loom run``, :func:`wrap`)."""
    return json.loads(_loom.Database.recall_tool())


def open(db: str = "loom.db", embedder: Optional[str] = None) -> Database:  # noqa: A001
    """Opens (creating if needed) a Loom database: an SQLite file path, a PostgreSQL URL
    (``postgres://user@host:port/dbname``) shared with ``loom serve``, or ``":memory:"`` for one
    that lives only as long as this handle (tests, replays, experiments). With ``embedder``
    (``"local:PATH"`` for a model folder, ``"openai:MODEL"``), memory search fuses vector
    similarity with full text; the model is loaded once, here."""
    return Database(_loom.open(str(db), embedder), str(db))


def count_tokens(text: str, model: str) -> int:
    """The number of tokens ``text`` is for ``model``: exact for OpenAI models (the same BPE as
    tiktoken), Loom's calibrated estimate for models without a public tokenizer."""
    return _loom.count_tokens(text, model)


def count_request(
    body: Mapping[str, Any], model: str, format: str = "openai-chat"
) -> int:
    """The exact number of input tokens a whole request ``body`` is for ``model``, as Loom
    budgets a render: messages, tool calls, tool definitions, images and the format's framing
    (``"openai-chat"``, ``"openai-responses"`` or ``"anthropic"``)."""
    return _loom.count_request(json.dumps(dict(body)), model, format)


def wrap(client: Any, session: str, db: Optional["Database"] = None, budget: Optional[int] = None) -> Any:
    """Wraps an ``openai.OpenAI`` or ``anthropic.Anthropic`` client: each ``create`` renders
    the conversation through Loom's session ``session`` within ``budget`` input tokens, and
    the reply and usage are recorded (see :mod:`loom.sdk`)."""
    from .sdk import wrap as _wrap

    return _wrap(client, session=session, db=db, budget=budget)


def connect(url: str, key: Optional[str] = None, timeout: float = 60.0) -> "Database":
    """The same interface over a running ``loom serve`` (its HTTP API under ``/loom/v1``)."""
    from .client import connect as _connect

    return _connect(url, key=key, timeout=timeout)


def _session_record(info: Dict[str, Any]) -> Dict[str, Any]:
    info.setdefault("parent", None)
    return info


def _call_record(call: Dict[str, Any]) -> Dict[str, Any]:
    """A model call in the HTTP API's shape: the receipt itself, without the compaction state
    the store keeps beside it."""
    receipt = call.get("receipt")
    if isinstance(receipt, dict) and "state" in receipt and "receipt" in receipt:
        receipt = receipt["receipt"]
    return {
        "id": call["id"],
        "session": call.get("session"),
        "at_seq": call.get("at_seq"),
        "created_ms": call.get("created_ms"),
        "receipt": receipt,
        "usage": call.get("usage"),
    }


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)
