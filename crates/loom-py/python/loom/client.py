"""`loom.connect(URL)`: the package's interface over a running `loom serve`.

The HTTP API under ``/loom/v1`` (docs/serve.md) answers each of the native module's calls, so
:class:`loom.Database` and :class:`loom.Session` work unchanged: code moves from embedded to
served by changing one constructor. Errors arrive as the API's ``{"error": {"type", "message",
"field"}}`` and are raised as the same exception classes. Only the standard library is used.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, Optional, Tuple

from ._loom import (
    Conflict,
    InvalidEvent,
    InvalidInput,
    LoomError,
    NotFound,
    SessionNotFound,
    Unavailable,
)

_KINDS = {
    "invalid_request": InvalidInput,
    "payload_too_large": InvalidInput,
    "not_found": NotFound,
    "conflict": Conflict,
    "unavailable": Unavailable,
}


def _error(status: int, body: bytes) -> LoomError:
    try:
        err = json.loads(body)["error"]
        kind, message, field = err.get("type"), err.get("message", ""), err.get("field")
    except (ValueError, KeyError, TypeError):
        kind, message, field = None, body.decode("utf-8", "replace") or f"HTTP {status}", None
    cls = _KINDS.get(kind, LoomError)
    if cls is NotFound and message.startswith("session") and message.endswith("not found"):
        cls = SessionNotFound
    record, reason = None, message
    if cls is InvalidInput and field and re.fullmatch(r"events\[\d+\]", field):
        # An event that breaks the log's rules: the message names its session, index and seq.
        cls = InvalidEvent
        named = re.search(r"(session `[^`]*`, event \d+ of the batch \(would be seq \d+\)): (.*)$", message)
        if named:
            record, reason = named.group(1), named.group(2)
    exc = cls(message)
    exc.record = record
    exc.field = field
    exc.reason = reason
    return exc


class Remote:
    """The native module's calls, answered by `loom serve` over HTTP."""

    #: `loom.wrap` does not answer `loom_recall` over HTTP (`loom serve` as the proxy does).
    answers_recall = False

    def __init__(self, url: str, key: Optional[str], timeout: float) -> None:
        self.base = url.rstrip("/")
        self.key = key
        self.timeout = timeout

    def _request(
        self,
        method: str,
        path: str,
        query: Optional[Dict[str, Any]] = None,
        body: Optional[bytes] = None,
    ) -> Tuple[int, bytes]:
        url = self.base + path
        if query:
            url += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        req = urllib.request.Request(url, data=body, method=method)
        if body is not None:
            req.add_header("content-type", "application/json")
        if self.key:
            req.add_header("authorization", f"Bearer {self.key}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as e:
            raise _error(e.code, e.read()) from None
        except urllib.error.URLError as e:
            raise Unavailable(f"loom serve at {self.base} cannot be reached: {e.reason}") from None

    def _json(self, method: str, path: str, query=None, payload: Any = None) -> Any:
        body = None if payload is None else json.dumps(payload).encode()
        return json.loads(self._request(method, path, query, body)[1])

    @staticmethod
    def _session(id: str) -> str:
        if not id:
            exc = InvalidInput("session: a session id must not be empty")
            exc.record, exc.field, exc.reason = None, "session", "must not be empty"
            raise exc
        return "/loom/v1/sessions/" + urllib.parse.quote(id, safe="")

    # The native module's calls, in its order (_loom.pyi).

    def create_session(self, session: str, agent: Optional[str] = None) -> str:
        payload: Dict[str, Any] = {"id": session}
        if agent is not None:
            payload["agent"] = agent
        return json.dumps(self._json("POST", "/loom/v1/sessions", payload=payload))

    def sessions(self) -> str:
        return json.dumps(self._json("GET", "/loom/v1/sessions")["sessions"])

    def delete_session(self, session: str) -> str:
        return json.dumps(self._json("DELETE", self._session(session)))

    def session_info(self, session: str) -> Optional[str]:
        try:
            return json.dumps(self._json("GET", self._session(session)))
        except NotFound:
            return None

    def append(self, session: str, events: str) -> Tuple[int, int]:
        payload = {"events": json.loads(events)}
        out = self._json("POST", self._session(session) + "/events", payload=payload)
        return out["first_seq"], out["last_seq"]

    def read(self, session: str, first: int, last: int) -> str:
        out = self._json("GET", self._session(session) + "/events", {"from": first, "to": last})
        return json.dumps(out["events"])

    def import_history(
        self, body: str, format: str, session: str, agent: Optional[str] = None
    ) -> str:
        query = {"session": session, "format": format, "agent": agent, "extend": "true"}
        _, out = self._request("POST", "/loom/v1/import", query, body.encode())
        return out.decode()

    def append_history(
        self, session: str, body: str, format: str, agent: Optional[str] = None
    ) -> Tuple[int, int]:
        query = {"format": format, "agent": agent}
        _, out = self._request("POST", self._session(session) + "/history", query, body.encode())
        seqs = json.loads(out)
        return seqs["first_seq"], seqs["last_seq"]

    def render(
        self,
        session: str,
        model: str,
        budget: Optional[int] = None,
        format: str = "openai-chat",
        tools: Optional[str] = None,
        recall: bool = False,
    ) -> Tuple[Dict[str, Any], "_Texts", Optional[int]]:
        if recall:
            raise InvalidInput("recall: the HTTP API renders without loom_recall; put `loom serve` in front of the model instead")
        payload: Dict[str, Any] = {"model": model, "format": format}
        if budget is not None:
            payload["budget"] = budget
        if tools is not None:
            payload["tools"] = json.loads(tools)
        out = self._json("POST", self._session(session) + "/render", payload=payload)
        return out["body"], _Texts(out["body"], out["receipt"]), out.get("model_call")

    def explain(self, session: str, seq: int) -> str:
        out = self._json("GET", self._session(session) + "/explain", {"event": seq})
        original = out.get("original", {})
        # The API links to where the original is; the package names it, as in-process.
        if "ref" in original:
            out["original"] = {"ref": original["ref"]}
        else:
            out["original"] = {"events": [seq, seq]}
        return json.dumps(out)

    def recall(self, reference: str, session: Optional[str] = None) -> bytes:
        if session is None:
            raise InvalidInput("session: a served database recalls within a session")
        return self._request("GET", self._session(session) + "/recall", {"ref": reference})[1]

    def report_usage(
        self,
        session: str,
        call: int,
        input_tokens: int,
        cached_input_tokens: Optional[int] = None,
        output_tokens: Optional[int] = None,
    ) -> str:
        payload: Dict[str, Any] = {"call": call, "input_tokens": input_tokens}
        if cached_input_tokens is not None:
            payload["cached_input_tokens"] = cached_input_tokens
        if output_tokens is not None:
            payload["output_tokens"] = output_tokens
        return json.dumps(self._json("POST", self._session(session) + "/usage", payload=payload))

    def model_calls(self, session: str) -> str:
        return json.dumps(self._json("GET", self._session(session) + "/receipts")["receipts"])

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
    ) -> str:
        if agent is None and session is not None and self.session_info(session) is not None:
            agent = json.loads(self.session_info(session) or "{}").get("agent")
        payload: Dict[str, Any] = {"query": query, "budget": budget}
        for name, value in (
            ("limit", limit),
            ("agent", agent),
            ("session", session),
            ("tier", tier),
            ("from_ms", from_ms),
            ("to_ms", to_ms),
        ):
            if value is not None:
                payload[name] = value
        return json.dumps(self._json("POST", "/loom/v1/memory/search", payload=payload))

    def memory_save(
        self,
        session: str,
        text: str,
        ttl_seconds: Optional[int] = None,
        seq: Optional[int] = None,
    ) -> str:
        payload: Dict[str, Any] = {"session": session, "text": text}
        if ttl_seconds is not None:
            payload["ttl_seconds"] = ttl_seconds
        if seq is not None:
            payload["seq"] = seq
        return json.dumps(self._json("POST", "/loom/v1/memory/items", payload=payload))


def connect(url: str, key: Optional[str] = None, timeout: float = 60.0):
    """A :class:`loom.Database` over `loom serve` at ``url`` (its root, e.g.
    ``http://127.0.0.1:8080``), authenticating with ``key`` under ``--auth keys``."""
    from . import Database

    return Database(Remote(url, key, timeout), url)


class _Texts:
    """A served render's body and receipt as JSON text, as the native module gives them."""

    __slots__ = ("_body", "_receipt")

    def __init__(self, body: Any, receipt: Any) -> None:
        self._body, self._receipt = body, receipt

    def body(self) -> str:
        return json.dumps(self._body, separators=(",", ":"), ensure_ascii=False)

    def receipt(self) -> str:
        return json.dumps(self._receipt, separators=(",", ":"), ensure_ascii=False)
