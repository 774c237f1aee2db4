"""The OpenAI Agents SDK: a :class:`LoomSession` that keeps the agent's conversation in Loom.

    from agents import Agent, Runner
    from loom.agents import LoomSession

    session = LoomSession("run-1", db=loom.open("loom.db"), model="gpt-4o", budget=16_000)
    await Runner.run(agent, "Fix the failing test", session=session)

``add_items`` appends the SDK's new items to the log (only the new ones; results may answer
calls made in an earlier batch). ``get_items`` returns what Loom renders for the next call: the
history fitted to the budget, cache-stable between compaction points, with large outputs
replaced by references (``db.recall`` gives them back). Loom's log is append-only:
``pop_item`` and ``clear_session`` continue the conversation in a fork (``run-1~2``,
``run-1~3``, ...) that holds everything but the popped item, or nothing; the earlier log stays.
"""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List, Optional

from . import Database, Session, SessionNotFound

try:  # The SDK is optional: the class works without it, and is a SessionABC when it is there.
    from agents.memory.session import SessionABC as _Base
except ImportError:  # pragma: no cover - exercised only without the SDK
    _Base = object  # type: ignore[assignment,misc]

FORK = "~"


def _latest_fork(db: Database, base: str) -> str:
    """The newest fork of ``base`` (``base~N`` with the highest N), or ``base``."""
    newest, best = base, 1
    prefix = base + FORK
    for info in db.sessions():
        sid = info["id"]
        if sid.startswith(prefix) and sid[len(prefix):].isdigit():
            n = int(sid[len(prefix):])
            if n > best:
                newest, best = sid, n
    return newest


def _new_fork(db: Database, base: str, agent: Optional[str]) -> Session:
    """A new, empty fork of ``base``, numbered after its newest."""
    newest = _latest_fork(db, base)
    n = int(newest[len(base) + 1:]) + 1 if newest != base else 2
    return db.create_session(f"{base}{FORK}{n}", agent=agent)


class LoomSession(_Base):  # type: ignore[misc,valid-type]
    """An OpenAI Agents SDK ``Session`` whose history is a Loom session."""

    def __init__(
        self,
        session_id: str,
        db: Database,
        model: str = "gpt-4o",
        budget: Optional[int] = None,
        agent: Optional[str] = None,
        session_settings: Any = None,
    ) -> None:
        self.session_id = session_id
        self.session_settings = session_settings
        self.db = db
        self.model = model
        self.budget = budget
        self.agent = agent
        self._lock = asyncio.Lock()
        self._log = _latest_fork(db, session_id)
        #: The receipt of the last render ``get_items`` made (what was kept and why).
        self.last_receipt: Optional[Dict[str, Any]] = None

    @property
    def log(self) -> Session:
        """The Loom session the conversation currently continues in."""
        return self.db.session(self._log)

    async def get_items(self, limit: Optional[int] = None) -> List[Dict[str, Any]]:
        async with self._lock:
            return await asyncio.to_thread(self._render_items, limit)

    def _render_items(self, limit: Optional[int]) -> List[Dict[str, Any]]:
        if not self.log.exists() or self.log.info["event_count"] == 0:
            return []
        rendered = self.log.render(model=self.model, budget=self.budget, format="openai-responses")
        self.last_receipt = rendered.receipt
        items = list(rendered.body.get("input", []))
        if limit is not None:
            items = items[-limit:] if limit > 0 else []
        return items

    async def add_items(self, items: List[Dict[str, Any]]) -> None:
        if not items:
            return
        async with self._lock:
            await asyncio.to_thread(
                self.log.append_history, [dict(i) for i in items], "responses", self.agent
            )

    async def pop_item(self) -> Optional[Dict[str, Any]]:
        async with self._lock:
            return await asyncio.to_thread(self._pop)

    def _pop(self) -> Optional[Dict[str, Any]]:
        log = self.log
        if not log.exists() or log.info["event_count"] == 0:
            return None
        events = log.events()
        if not events:
            return None
        # The popped item as the SDK gave it (Loom's rendering of the last event).
        last_items = log.render(model=self.model, format="openai-responses").body.get("input", [])
        popped = last_items[-1] if last_items else None
        self._fork([{k: v for k, v in e.items() if k != "seq"} for e in events[:-1]])
        return popped

    async def clear_session(self) -> None:
        async with self._lock:
            await asyncio.to_thread(self._fork, [])

    def _fork(self, events: List[Dict[str, Any]]) -> None:
        fork = _new_fork(self.db, self.session_id, self.agent)
        if events:
            fork.append(events)
        self._log = fork.id

    async def run_compaction(self, args: Optional[Dict[str, Any]] = None) -> None:
        """Compaction-aware sessions are asked to compact after a turn; Loom compacts when it
        renders (at a compaction point chosen to keep the cached prefix), so there is nothing
        to do here but check the session renders."""
        async with self._lock:
            await asyncio.to_thread(self._render_items, None)


__all__ = ["LoomSession", "SessionNotFound"]
