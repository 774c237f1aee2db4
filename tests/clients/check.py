#!/usr/bin/env python3
"""Checks what the mock upstream received through `loom serve` (tests/clients/run.sh).

  check.py --mock DIR --client DIR --mode observe|fit [--json OUT]
  check.py --mock DIR --mode direct [--json OUT]

--mock is mock_upstream.py's record (what reached the provider, and what the mock replied);
--client is recorder.py's record (what the client sent to Loom, and Loom's replies). A direct run
(client -> mock) has no client record: only `pairing` and `thinking` (what the mock emitted came
back unchanged) are checked.

Checks:
  errors     every reply Loom gave the client is 2xx (else: status and error body)
  pairing    in every request the mock received, every tool call has its result and every result
             its call, by the provider's rules (Anthropic: tool_result blocks in the user message
             right after the assistant's tool_use; Responses: *_call / *_call_output by call_id;
             Chat: the assistant's tool_calls answered by the tool messages that follow;
             Gemini: a model content's functionCall parts answered, by id and name, by the
             functionResponse parts of the user content right after it)
  thinking   every thinking block (Anthropic) / reasoning item (Responses) / thoughtSignature
             (Gemini) the mock received is one the mock emitted, byte for byte (thinking text and
             signature; id, summary and encrypted_content; the signature); and the ones the client sent in its request are all still there
             (fit may drop old turns, but then the latest assistant turn's must stay)
  observe    (observe mode) every body the client sent to a model route reached the mock
             byte-identical
  sessions   (--scenario compact) the client's conversation is one Loom session through its own
             compactions: no reply to a request the mock played as the conversation (its turns
             and the client's summary requests; side requests such as titles and opencode's
             summarizer agent aside) says X-Loom-Diverged, and all of them were logged in one
             session
  shape      (fit mode) every message or item the mock received that says what one of the
             client's says (same meaning: ids, statuses, per-request metadata, `developer` vs
             `system`, Loom's "[system]" label aside) is the client's, byte for byte but for
             cache breakpoints: Loom changes no role and drops no field of what it keeps

Prints one line per problem and a summary; exits 1 when there is a problem.
"""

import argparse
import base64
import collections
import hashlib
import json
import os
import re
import sys

MODEL_ROUTES = ("/v1/messages", "/v1/responses", "/v1/chat/completions")
# Gemini's model routes (countTokens is not one).
GEMINI_ROUTE = re.compile(r"/models/[^/:]+:(generateContent|streamGenerateContent)$")


def load_dir(d):
    reqs = []
    if not os.path.isdir(d):
        return reqs
    for name in sorted(os.listdir(d)):
        if not re.fullmatch(r"\d{4}\.json", name):
            continue
        with open(os.path.join(d, name)) as f:
            rec = json.load(f)
        raw = rec.get("body_raw")
        if raw is None and "body_base64" in rec:
            raw_bytes = base64.b64decode(rec["body_base64"])
        else:
            raw_bytes = (raw or "").encode("utf-8")
        rec["raw"] = raw_bytes
        try:
            rec["body"] = json.loads(raw_bytes) if raw_bytes else None
        except ValueError:
            rec["body"] = None
        reply_path = os.path.join(d, name.replace(".json", ".reply.json"))
        rec["reply"] = None
        if os.path.exists(reply_path):
            with open(reply_path) as f:
                rec["reply"] = json.load(f)
        reqs.append(rec)
    return reqs


def fmt_of(path):
    if path.endswith("/messages"):
        return "anthropic"
    if path.endswith("/responses"):
        return "responses"
    if path.endswith("/chat/completions"):
        return "chat"
    if GEMINI_ROUTE.search(path):
        return "gemini"
    return None


def gemini_contents(body):
    return [c for c in body.get("contents") or [] if isinstance(c, dict)] if isinstance(body, dict) else []


def gemini_parts(content, key):
    return [(j, p) for j, p in enumerate(content.get("parts") or [])
            if isinstance(p, dict) and isinstance(p.get(key), dict)]


# -- pairing


def pairing_problems(fmt, body):
    out = []
    if not isinstance(body, dict):
        return out
    if fmt == "gemini":
        return gemini_pairing(body)
    if fmt == "anthropic":
        msgs = body.get("messages") or []
        for i, m in enumerate(msgs):
            blocks = m.get("content") if isinstance(m.get("content"), list) else []
            if m.get("role") == "assistant":
                ids = [b.get("id") for b in blocks if isinstance(b, dict) and b.get("type") in ("tool_use", "server_tool_use")
                       and b.get("type") == "tool_use"]
                if not ids:
                    continue
                nxt = msgs[i + 1] if i + 1 < len(msgs) else None
                got = set()
                if nxt and nxt.get("role") == "user" and isinstance(nxt.get("content"), list):
                    got = {b.get("tool_use_id") for b in nxt["content"] if isinstance(b, dict) and b.get("type") == "tool_result"}
                for tid in ids:
                    if tid not in got:
                        out.append(f"messages[{i}]: tool_use {tid} has no tool_result in messages[{i + 1}]")
            elif m.get("role") == "user":
                res = [b.get("tool_use_id") for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
                if not res:
                    continue
                prev = msgs[i - 1] if i > 0 else None
                have = set()
                if prev and prev.get("role") == "assistant" and isinstance(prev.get("content"), list):
                    have = {b.get("id") for b in prev["content"] if isinstance(b, dict) and b.get("type") == "tool_use"}
                for tid in res:
                    if tid not in have:
                        out.append(f"messages[{i}]: tool_result {tid} answers no tool_use in messages[{i - 1}]")
    elif fmt == "responses":
        items = body.get("input") if isinstance(body.get("input"), list) else []
        calls, outs = {}, {}
        for i, it in enumerate(items):
            if not isinstance(it, dict):
                continue
            t = it.get("type")
            if t in ("function_call", "custom_tool_call", "local_shell_call", "tool_search_call"):
                calls.setdefault(it.get("call_id"), i)
            elif t in ("function_call_output", "custom_tool_call_output", "local_shell_call_output", "tool_search_output"):
                outs.setdefault(it.get("call_id"), i)
        for cid, i in calls.items():
            if cid not in outs:
                out.append(f"input[{i}]: call {cid} has no output")
            elif outs[cid] < i:
                out.append(f"input[{outs[cid]}]: output {cid} comes before its call input[{i}]")
        for cid, i in outs.items():
            if cid not in calls:
                out.append(f"input[{i}]: output {cid} answers no call")
    else:
        msgs = body.get("messages") or []
        pending, pending_at = set(), None
        for i, m in enumerate(msgs):
            role = m.get("role")
            if role == "tool":
                if m.get("tool_call_id") not in pending:
                    out.append(f"messages[{i}]: tool message {m.get('tool_call_id')} answers no pending tool call")
                pending.discard(m.get("tool_call_id"))
                continue
            if pending:
                out.append(f"messages[{pending_at}]: tool calls {sorted(pending)} have no tool message")
                pending = set()
            if role == "assistant" and m.get("tool_calls"):
                pending = {c.get("id") for c in m["tool_calls"]}
                pending_at = i
        if pending:
            out.append(f"messages[{pending_at}]: tool calls {sorted(pending)} have no tool message")
    return out


def gemini_pairing(body):
    """Gemini: every functionCall of a model content is answered by a functionResponse with its id
    and name in the user content right after it, and every functionResponse answers one of the
    model content right before it."""
    out = []
    cs = gemini_contents(body)
    # A request without tools is a question about a slice of the history (Gemini CLI's loop
    # check sends its last 20 contents and then asks, in a user text, whether they loop): the
    # model content before that question may end on calls with no result.
    question = not body.get("tools")

    def key(p, kind):
        return (p[kind].get("id"), p[kind].get("name"))

    for i, c in enumerate(cs):
        if c.get("role") == "model":
            calls = [key(p, "functionCall") for _, p in gemini_parts(c, "functionCall")]
            nxt = cs[i + 1] if i + 1 < len(cs) else None
            got = {key(p, "functionResponse") for _, p in gemini_parts(nxt, "functionResponse")} \
                if nxt and nxt.get("role") == "user" else set()
            if question and nxt is not None and nxt.get("role") == "user" and not got:
                continue
            for cid, name in calls:
                if (cid, name) not in got:
                    out.append(f"contents[{i}]: functionCall {name} {cid} has no functionResponse in contents[{i + 1}]")
        elif c.get("role") == "user":
            res = [key(p, "functionResponse") for _, p in gemini_parts(c, "functionResponse")]
            prev = cs[i - 1] if i > 0 else None
            have = {key(p, "functionCall") for _, p in gemini_parts(prev, "functionCall")} \
                if prev and prev.get("role") == "model" else set()
            for cid, name in res:
                if (cid, name) not in have:
                    out.append(f"contents[{i}]: functionResponse {name} {cid} answers no functionCall in contents[{i - 1}]")
    return out


# -- thinking / reasoning


def thinking_in(fmt, body):
    """(position, key, value) of every thinking block / reasoning item in a request."""
    found = []
    if not isinstance(body, dict):
        return found
    if fmt == "anthropic":
        for i, m in enumerate(body.get("messages") or []):
            if m.get("role") == "assistant" and isinstance(m.get("content"), list):
                for j, b in enumerate(m["content"]):
                    if isinstance(b, dict) and b.get("type") == "thinking":
                        found.append((f"messages[{i}].content[{j}]", b.get("signature"),
                                      {"thinking": b.get("thinking"), "signature": b.get("signature")}))
                    elif isinstance(b, dict) and b.get("type") == "redacted_thinking":
                        found.append((f"messages[{i}].content[{j}]", b.get("data"), {"data": b.get("data")}))
    elif fmt == "responses":
        for i, it in enumerate(body.get("input") or [] if isinstance(body.get("input"), list) else []):
            if isinstance(it, dict) and it.get("type") == "reasoning":
                found.append((f"input[{i}]", it.get("id"),
                              {"id": it.get("id"), "summary": it.get("summary"),
                               "encrypted_content": it.get("encrypted_content")}))
    elif fmt == "gemini":
        # The signatures (thought parts themselves are the client's to keep or drop; Gemini CLI
        # drops them).
        for i, c in enumerate(gemini_contents(body)):
            if c.get("role") != "model":
                continue
            for j, p in enumerate(c.get("parts") or []):
                if isinstance(p, dict) and p.get("thoughtSignature"):
                    found.append((f"contents[{i}].parts[{j}]", p["thoughtSignature"],
                                  {"thoughtSignature": p["thoughtSignature"]}))
    return found


def emitted_thinking(mock_reqs):
    emitted = {}
    for r in mock_reqs:
        rep = r.get("reply") or {}
        for p in rep.get("turn") or []:
            fmt = fmt_of(r["path"])
            if fmt == "gemini" and p.get("signature"):
                emitted[p["signature"]] = {"thoughtSignature": p["signature"]}
            if p.get("type") != "thinking":
                continue
            if fmt == "anthropic":
                emitted[p["signature"]] = {"thinking": p["text"], "signature": p["signature"]}
            elif fmt == "responses":
                enc = "reasoning.encrypted_content" in ((r.get("body") or {}).get("include") or [])
                emitted[p["id"]] = {"id": p["id"], "summary": [{"type": "summary_text", "text": p["text"]}],
                                    "encrypted_content": p["signature"] if enc else None}
    return emitted


def conv_key(fmt, body):
    if not isinstance(body, dict):
        return ""
    if fmt == "responses":
        items = body.get("input")
        if isinstance(items, str):
            return items[:200]
        for it in items or []:
            if isinstance(it, dict) and it.get("role") == "user":
                return json.dumps(it.get("content"))[:200]
        return ""
    if fmt == "gemini":
        for c in gemini_contents(body):
            if c.get("role") == "user":
                return json.dumps(c.get("parts"))[:200]
        return ""
    for m in body.get("messages") or []:
        if m.get("role") == "user":
            return json.dumps(m.get("content"))[:200]
    return ""


# -- shape (fit): what Loom keeps goes upstream as the client wrote it

CHURN_FIELDS = ("internal_chat_message_metadata_passthrough", "metadata", "create_time",
                "created_at", "timestamp")


def conversation(fmt, body):
    if not isinstance(body, dict):
        return []
    items = {"responses": body.get("input"), "gemini": body.get("contents")}.get(fmt, body.get("messages"))
    return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []


def without_breakpoints(v):
    if isinstance(v, dict):
        return {k: without_breakpoints(x) for k, x in v.items() if k != "cache_control"}
    if isinstance(v, list):
        return [without_breakpoints(x) for x in v]
    return v


def meaning(v, top=True):
    """What an item says, as Loom's fit compares it (proxy/fit.rs `meaning`)."""
    if isinstance(v, list):
        return [meaning(x, False) for x in v]
    if not isinstance(v, dict):
        return v
    if top and v.get("role") == "user":
        text = v.get("content")
        if isinstance(text, list) and len(text) == 1 and isinstance(text[0], dict):
            text = text[0].get("text")
        if isinstance(text, str) and text.startswith("[system]\n"):
            return {"role": "system", "content": text[len("[system]\n"):]}
    call = v.get("type") in ("function", "custom", "tool_use")
    out = {}
    for k, x in v.items():
        if (k == "id" and not call) or k in ("status", "cache_control", "annotations") \
                or k in CHURN_FIELDS or x is None or x is False:
            continue
        if k == "role" and x == "developer":
            x = "system"
        if k == "type" and x == "message":
            continue
        if k in ("content", "output") and isinstance(x, list) and len(x) == 1 \
                and isinstance(x[0], dict) and x[0].get("type") in ("text", "input_text", "output_text") \
                and isinstance(x[0].get("text"), str):
            x = x[0]["text"]
        out[k] = meaning(x, False)
    return out


def canon(v):
    return json.dumps(v, sort_keys=True, separators=(",", ":"))


def shape_problems(fmt, client_body, sent_body):
    """Items of the fitted body that say what a client item says in another shape."""
    theirs = {}
    exact = set()
    for it in conversation(fmt, client_body):
        theirs.setdefault(canon(meaning(it)), it)
        exact.add(canon(without_breakpoints(it)))
    out = []
    for n, it in enumerate(conversation(fmt, sent_body)):
        if canon(without_breakpoints(it)) in exact:
            continue
        c = theirs.get(canon(meaning(it)))
        if c is None:
            continue  # Loom's own writing: a stub, a group, the compact block
        if c.get("role") != it.get("role"):
            what = f"role {c.get('role')!r} sent as {it.get('role')!r}"
        else:
            lost = sorted(set(c) - set(it))
            what = f"fields {lost} dropped" if lost else "kept in another shape"
        out.append(f"item {n}: {what}: {canon(it)[:160]}")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mock", required=True)
    ap.add_argument("--client")
    ap.add_argument("--mode", choices=("direct", "observe", "fit"), required=True)
    ap.add_argument("--scenario")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.mode != "direct" and not args.client:
        ap.error("--client is needed in observe and fit")
    mock = load_dir(args.mock)
    client = load_dir(args.client) if args.mode != "direct" else []
    problems = collections.defaultdict(list)

    for r in client:
        st = (r.get("reply") or {}).get("status")
        if st is None or not (200 <= st < 300):
            body = ((r.get("reply") or {}).get("body") or "").strip().replace("\n", " ")
            problems["errors"].append(f"client request {r['seq']:04d} {r['method']} {r['path']}: loom replied {st}: {body[:400]}")

    model_mock = [r for r in mock if fmt_of(r["path"]) and r["method"] == "POST" and not r["path"].endswith("count_tokens")]
    model_client = [r for r in client if fmt_of(r["path"]) and r["method"] == "POST" and not r["path"].endswith("count_tokens")]

    for r in model_mock:
        for p in pairing_problems(fmt_of(r["path"]), r["body"]):
            problems["pairing"].append(f"mock request {r['seq']:04d}: {p}")

    emitted = emitted_thinking(mock)
    for r in model_mock:
        fmt = fmt_of(r["path"])
        for pos, key, val in thinking_in(fmt, r["body"]):
            want = emitted.get(key)
            if want is None:
                problems["thinking"].append(f"mock request {r['seq']:04d} {pos}: a thinking/reasoning block the mock never emitted")
                continue
            for k, v in want.items():
                if val.get(k) != v:
                    problems["thinking"].append(f"mock request {r['seq']:04d} {pos}: `{k}` differs from what the mock emitted")

    # Client request i and the mock request it became: same route and conversation, in order.
    def groups(reqs):
        g = collections.defaultdict(list)
        for r in reqs:
            g[(r["path"], conv_key(fmt_of(r["path"]), r["body"]))].append(r)
        return g

    gm = groups(model_mock)
    for key, creqs in groups(model_client).items():
        mreqs = gm.get(key, [])
        for c, m in zip(creqs, mreqs):
            fmt = fmt_of(c["path"])
            sent = {k for _, k, _ in thinking_in(fmt, c["body"])}
            got = {k for _, k, _ in thinking_in(fmt, m["body"])}
            missing = sent - got
            if missing and args.mode == "observe":
                problems["thinking"].append(f"client request {c['seq']:04d}: {len(missing)} thinking/reasoning blocks did not reach the mock")
            elif missing:
                # fit may leave old turns out; the latest assistant turn's must stay.
                last = [k for _, k, _ in thinking_in(fmt, c["body"])][-1:]
                if last and last[0] in missing:
                    problems["thinking"].append(f"client request {c['seq']:04d}: the latest turn's thinking/reasoning was dropped")

    if args.mode == "fit":
        for key, creqs in groups(model_client).items():
            for c, m in zip(creqs, gm.get(key, [])):
                for p in shape_problems(fmt_of(c["path"]), c["body"], m["body"]):
                    problems["shape"].append(f"client request {c['seq']:04d} -> mock {m['seq']:04d}: {p}")

    if args.scenario == "compact":
        sessions = collections.Counter()
        for key, creqs in groups(model_client).items():
            for c, m in zip(creqs, gm.get(key, [])):
                note = (m.get("reply") or {}).get("note") or ""
                h = {k.lower(): v for k, v in (c.get("reply") or {}).get("headers") or []}
                if note.startswith("side"):
                    continue  # a conversation of its own (a title, opencode's summarizer)
                if "x-loom-diverged" in h:
                    problems["sessions"].append(f"client request {c['seq']:04d}: forked from {h['x-loom-diverged']}")
                if note and "x-loom-session" in h:
                    sessions[h["x-loom-session"]] += 1
        if len(sessions) > 1:
            problems["sessions"].append(f"the conversation was logged in {len(sessions)} sessions: {dict(sessions)}")

    if args.mode == "observe":
        got = collections.Counter(hashlib.sha256(r["raw"]).hexdigest() for r in model_mock)
        for c in model_client:
            h = hashlib.sha256(c["raw"]).hexdigest()
            st = (c.get("reply") or {}).get("status")
            if got[h] > 0:
                got[h] -= 1
                continue
            if st is not None and st >= 400:
                continue  # already reported under errors
            # Find the mock request it most likely became, and say where they differ.
            cands = gm.get((c["path"], conv_key(fmt_of(c["path"]), c["body"])), [])
            detail = ""
            for m in cands:
                a, b = c["raw"], m["raw"]
                n = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
                detail = (f"; first difference at byte {n} (client {len(a)} bytes, mock {len(b)}): "
                          f"client {a[max(0, n - 40):n + 60]!r} mock {b[max(0, n - 40):n + 60]!r}")
                break
            problems["observe"].append(f"client request {c['seq']:04d} {c['path']}: body not received byte-identical{detail}")

    # Not a failure, but worth seeing: how often Loom forked the session (X-Loom-Diverged), and in
    # fit mode how many bodies it changed.
    diverged = 0
    for c in model_client:
        h = {k.lower(): v for k, v in (c.get("reply") or {}).get("headers") or []}
        diverged += "x-loom-diverged" in h
    mock_hashes = collections.Counter(hashlib.sha256(r["raw"]).hexdigest() for r in model_mock)
    changed = sum(1 for c in model_client if not mock_hashes[hashlib.sha256(c["raw"]).hexdigest()])
    if args.mode != "direct":
        print(f"  sessions: {diverged}/{len(model_client)} calls diverged, {changed} bodies changed by Loom")

    total = sum(len(v) for v in problems.values())
    for kind in ("errors", "pairing", "thinking", "observe", "sessions", "shape"):
        for p in problems.get(kind, [])[:20]:
            print(f"  {kind}: {p}")
        extra = len(problems.get(kind, [])) - 20
        if extra > 0:
            print(f"  {kind}: ... and {extra} more")
    print(f"  check: {len(model_client) if args.mode != 'direct' else 'no'} client model calls, {len(model_mock)} reached the mock, "
          f"{len(emitted)} thinking/reasoning emitted; {total} problems")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({k: v for k, v in problems.items()}, f, indent=1)
    sys.exit(1 if total else 0)


if __name__ == "__main__":
    main()
