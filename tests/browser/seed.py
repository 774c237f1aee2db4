#!/usr/bin/env python3
"""Seeds a `loom serve` through its HTTP API for the inspector's browser test (standard library
only; no curl on a fresh machine).

    seed.py trace URL KEY SESSION TRACE_FILE INDEX BUDGET
        A shared trace's trajectory, appended message by message as a live agent's log grows,
        with a render at BUDGET tokens before every assistant turn (one model call each) and a
        made-up usage report for each call (cached share growing between compaction points).
    seed.py generated URL KEY SESSION EVENTS CALLS
        A generated session of EVENTS events with CALLS model calls, for the page-load figures.

    seed.py proxied URL KEY SESSION
        One Chat call through the proxy in fit mode at a small budget, with a tool definition and
        fields Loom does not model (so the body sent upstream is spliced, not the client's).
        Prints {"session", "call"}.

Prints one JSON line: {"session", "events", "calls"}.
"""
import json
import sys
import urllib.error
import urllib.request


def call(url, key, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method)
    req.add_header("Authorization", "Bearer " + key)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        sys.exit(f"{method} {path}: {e.code} {e.read().decode(errors='replace')[:500]}")


def history(url, key, session, messages):
    call(url, key, "POST", f"/loom/v1/sessions/{session}/history?format=openai", messages)


def render(url, key, session, budget, usage):
    out = call(url, key, "POST", f"/loom/v1/sessions/{session}/render",
               {"model": "gpt-4o", "budget": budget, "format": "openai-chat"})
    n = out.get("model_call")
    if n is not None and usage:
        est = out["receipt"]["estimate"]
        # A provider counts a little above Loom's estimate, and caches the prefix since the last
        # compaction point.
        fired = out["receipt"].get("compaction") is not None
        cached = 0 if fired or n == 1 else int(est * 0.7) // 128 * 128
        call(url, key, "POST", f"/loom/v1/sessions/{session}/usage",
             {"call": n, "input_tokens": est + 3, "cached_input_tokens": cached, "output_tokens": 120})
    return n


def trace(url, key, session, path, index, budget):
    with open(path) as f:
        for i, line in enumerate(f):
            if i == int(index):
                messages = json.loads(line)["messages"]
                break
        else:
            sys.exit(f"{path} has no trajectory {index}")
    calls, pending = 0, []
    for m in messages:
        if m["role"] == "assistant" and pending:
            history(url, key, session, pending)
            pending = []
            if render(url, key, session, int(budget), True) is not None:
                calls += 1
        pending.append(m)
    if pending:
        history(url, key, session, pending)
    info = call(url, key, "GET", f"/loom/v1/sessions/{session}")
    return {"session": session, "events": info["event_count"], "calls": calls}


def generated(url, key, session, events, calls):
    events, calls = int(events), int(calls)
    first = [{"role": "system", "content": "You are a careful coding agent."},
             {"role": "user", "content": "Find and fix the failing test in the repository."}]
    history(url, key, session, first)
    turns = (events - 2) // 2
    every = max(1, turns // max(1, calls - 1))
    made = 1 if render(url, key, session, 6000, True) is not None else 0
    for t in range(turns):
        out = "\n".join(f"line {j} of the output of command {t}: ok" for j in range(8 if t % 5 else 120))
        history(url, key, session, [
            {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{t}", "type": "function",
             "function": {"name": "bash", "arguments": json.dumps({"command": f"run step {t}"})}}]},
            {"role": "tool", "tool_call_id": f"c{t}", "content": out}])
        if t % every == 0 and made < calls:
            if render(url, key, session, 6000, True) is not None:
                made += 1
    info = call(url, key, "GET", f"/loom/v1/sessions/{session}")
    return {"session": session, "events": info["event_count"], "calls": made}


def proxied(url, key, session):
    out = "\n".join(f"line {i} of the build log" for i in range(3000))
    body = {
        "model": "gpt-4o", "temperature": 0.25, "user": "browser-test",
        "tools": [{"type": "function", "function": {"name": "bash", "description": "Runs a command.",
                   "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}],
        "messages": [
            {"role": "system", "content": "You are a careful coding agent."},
            {"role": "user", "content": "Build it."},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
             "function": {"name": "bash", "arguments": json.dumps({"command": "make"})}}]},
            {"role": "tool", "tool_call_id": "c1", "content": out},
            {"role": "user", "content": "Does it pass now?"},
        ],
    }
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(), method="POST")
    for name, value in [("Authorization", "Bearer " + key), ("Content-Type", "application/json"),
                        ("X-Loom-Session", session), ("X-Loom-Mode", "fit"), ("X-Loom-Budget", "2000")]:
        req.add_header(name, value)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            r.read()
            return {"session": session, "call": int(r.headers["x-loom-call"])}
    except urllib.error.HTTPError as e:
        sys.exit(f"POST /v1/chat/completions: {e.code} {e.read().decode(errors='replace')[:500]}")


if __name__ == "__main__":
    what, url, key, session, *rest = sys.argv[1:]
    if what == "trace":
        result = trace(url, key, session, *rest)
    elif what == "proxied":
        result = proxied(url, key, session)
    else:
        result = generated(url, key, session, *rest)
    print(json.dumps(result))
