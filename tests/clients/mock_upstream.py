#!/usr/bin/env python3
"""A scripted mock model provider for the real-client suite (tests/clients).

Speaks the four wire formats a real agent CLI uses, streamed (SSE, chunked transfer encoding,
as the providers send it) or not:

  POST /v1/messages                 Anthropic Messages (+ /v1/messages/count_tokens)
  POST /v1/responses                OpenAI Responses
  POST /v1/chat/completions         OpenAI Chat Completions
  POST /v1beta/models/M:generateContent, :streamGenerateContent?alt=sse, :countTokens   Gemini
  GET  /v1/models                   a small model list (both shapes)

and plays a short coding task through the client's OWN tools. The next step is derived only from
the request (the number of tool results in the conversation so far, or for aider, which has no
tools, the test output it reflects back), so every conversation is a deterministic state machine
and side requests (titles, summaries, quota probes, commit messages) get a plain text answer.

Every request is recorded in --record DIR as NNNN.json (method, path, query, headers, raw body)
and every reply as NNNN.reply.json (status, the turn played, and the exact bytes sent), so the
requests can be kept as a wire corpus (see `export`) and checked (check.py).

Usage:
  mock_upstream.py serve --listen 127.0.0.1:0 --record DIR [--scenario short|long|edits|recall|compact] [--workdir PATH]
  mock_upstream.py make-repo DIR --scenario short|long|edits|recall|compact
  mock_upstream.py export RECORD_DIR FIXTURE_DIR [--limit N]
  mock_upstream.py verify-repo DIR --scenario S     (exit 0 when the task was done in DIR)

Only the standard library is used.
"""

import argparse
import base64
import gzip
import hashlib
import http.server
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.parse
import zlib

SCENARIOS = ("short", "long", "edits", "recall", "compact")
LONG_READS = 30
LONG_FILE_BYTES = 40_000
EDITS_CONSTANTS = 98  # + the two bug fixes = 100 edits
TEST_PASSED = "calc tests passed"
TEST_COMMAND = "python3 test_calc.py"
FINAL_ANSWER = "I fixed add and mul in calc.py; `python3 test_calc.py` now passes."
MINI_SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"

TASK = ("calc.py has bugs: test_calc.py fails. Fix calc.py so that `python3 test_calc.py` passes, "
        "then run the test.")


# ----------------------------------------------------------------------------------------------
# The scratch repository and the script of each scenario.

BUG_ADD = ("    return a - b  # BUG", "    return a + b")
BUG_MUL = ("    return a ** b  # BUG", "    return a * b")


def calc_source(scenario):
    lines = ['"""A tiny calculator."""', ""]
    if scenario == "edits":
        lines += [f"K{i:03d} = 0  # set me" for i in range(EDITS_CONSTANTS)] + [""]
    lines += ["", "def add(a, b):", BUG_ADD[0], "", "", "def mul(a, b):", BUG_MUL[0], ""]
    return "\n".join(lines)


def test_source(scenario):
    lines = ["import calc", "",
             'assert calc.add(2, 3) == 5, f"add(2, 3) returned {calc.add(2, 3)}, expected 5"',
             'assert calc.mul(2, 3) == 6, f"mul(2, 3) returned {calc.mul(2, 3)}, expected 6"']
    if scenario == "edits":
        lines += [f"for i in range({EDITS_CONSTANTS}):",
                  '    value = getattr(calc, f"K{i:03d}")',
                  '    assert value == i, f"K{i:03d} is {value}, expected {i}"']
    lines += [f'print("{TEST_PASSED}")', ""]
    return "\n".join(lines)


def note_source(i):
    out, n = [], 0
    while sum(len(x) + 1 for x in out) < LONG_FILE_BYTES:
        out.append(f"part {i:02d} line {n:04d}: the calculator keeps its notes here; "
                   f"nothing in this line matters to the bug (checksum {hashlib.sha1(f'{i}/{n}'.encode()).hexdigest()[:12]}).")
        n += 1
    return "\n".join(out) + "\n"


def make_repo(path, scenario):
    os.makedirs(path, exist_ok=True)
    files = {"calc.py": calc_source(scenario), "test_calc.py": test_source(scenario),
             "README.md": "# calc\n\nA tiny calculator. Run `python3 test_calc.py`.\n"}
    if scenario in ("long", "recall", "compact"):
        for i in range(LONG_READS):
            files[f"notes/part_{i:02d}.txt"] = note_source(i)
    for name, text in files.items():
        full = os.path.join(path, name)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(text)
    env = dict(os.environ, GIT_AUTHOR_NAME="loom", GIT_AUTHOR_EMAIL="loom@example.invalid",
               GIT_COMMITTER_NAME="loom", GIT_COMMITTER_EMAIL="loom@example.invalid")
    for cmd in (["git", "init", "-q", "-b", "main"], ["git", "add", "-A"],
                ["git", "commit", "-q", "-m", "calc with bugs"]):
        subprocess.run(cmd, cwd=path, env=env, check=True, timeout=60)


def verify_repo(path, scenario):
    """The task is done when calc.py differs from its buggy self and the test passes."""
    with open(os.path.join(path, "calc.py")) as f:
        text = f.read()
    if text == calc_source(scenario):
        return False, "calc.py was not edited"
    r = subprocess.run([sys.executable, "test_calc.py"], cwd=path, capture_output=True, text=True,
                       timeout=60)
    if r.returncode != 0 or TEST_PASSED not in r.stdout:
        return False, "test_calc.py fails: " + (r.stderr.strip().splitlines() or ["?"])[-1]
    return True, "calc.py edited and test_calc.py passes"


def steps(scenario):
    """The abstract script: (kind, argument...)."""
    s = [("list",), ("read", "calc.py")]
    if scenario in ("long", "recall", "compact"):
        s += [("read", f"notes/part_{i:02d}.txt") for i in range(LONG_READS)]
    if scenario == "recall":
        # Read again, with the client's own file tool, the file a stub names (Loom's `recall =
        # "files"`): the first note when no stub names one (a direct run).
        s += [("reread",)]
    if scenario == "edits":
        s += [("edit", "calc.py", f"K{i:03d} = 0  # set me", f"K{i:03d} = {i}")
              for i in range(EDITS_CONSTANTS)]
    s += [("edit", "calc.py") + BUG_ADD, ("edit", "calc.py") + BUG_MUL, ("test",), ("answer",)]
    return s


def describe(step):
    kind = step[0]
    if kind == "list":
        return "Let me look at the files in the repository first."
    if kind == "read":
        return f"I'll read {step[1]}."
    if kind == "reread":
        return "I need that earlier output again; I'll read the file it was saved to."
    if kind == "edit":
        return f"I'll fix `{step[2].strip()}` in {step[1]}."
    if kind == "test":
        return "Now I'll run the test."
    return FINAL_ANSWER


# ----------------------------------------------------------------------------------------------
# Turns: what the model says. A turn is a list of parts:
#   {"type": "thinking", "text", "signature"}       (Anthropic thinking / Responses reasoning)
#   {"type": "text", "text"}
#   {"type": "tool", "name", "id", "input": dict}   (function / tool_use)
#   {"type": "custom_tool", "name", "id", "input": str}  (Responses freeform tool, e.g. apply_patch)


def digest(*parts):
    return hashlib.sha256("\x00".join(str(p) for p in parts).encode()).hexdigest()


def signature_for(seed):
    raw = hashlib.sha512(seed.encode()).digest() * 3
    return base64.b64encode(raw).decode()


def tool_part(name, seed, args, prefix):
    return {"type": "tool", "name": name, "id": prefix + digest(seed, name)[:24], "input": args}


def python_replace_command(path, old, new):
    return ("python3 - <<'PY'\nimport pathlib\n"
            f"p = pathlib.Path({json.dumps(path)})\ns = p.read_text()\n"
            f"old, new = {json.dumps(old)}, {json.dumps(new)}\n"
            "assert old in s, 'old text not found'\np.write_text(s.replace(old, new, 1))\n"
            f"print('edited', p)\nPY")


def apply_patch_text(path, old, new):
    return f"*** Begin Patch\n*** Update File: {path}\n@@\n-{old}\n+{new}\n*** End Patch\n"


# ----------------------------------------------------------------------------------------------
# Reading a request: the client flavour, the tool results so far, the working directory.


# Gemini (generateContent): `contents` of `user` / `model` turns made of parts; a call is a model
# part {"functionCall": {"id", "name", "args"}} (the first of a turn with a `thoughtSignature`
# beside it), its result a user part {"functionResponse": {"id", "name", "response"}}.
GEMINI_ROUTE = re.compile(r"/models/([^/:]+):(generateContent|streamGenerateContent|countTokens)$")


def gemini_contents(body):
    return [c for c in body.get("contents") or [] if isinstance(c, dict)]


def gemini_parts(content):
    return [p for p in (content.get("parts") or []) if isinstance(p, dict)]


def gemini_response_text(fr):
    """The text of a functionResponse: its `output` (Gemini CLI's key), else the whole response."""
    resp = fr.get("response")
    if isinstance(resp, dict):
        if isinstance(resp.get("output"), str):
            return resp["output"]
        if isinstance(resp.get("error"), str):
            return resp["error"]
    return resp if isinstance(resp, str) else json.dumps(resp)


def gemini_text(content, results=True):
    """The text parts of a Gemini Content (thoughts aside), and its function results' text."""
    if isinstance(content, str):
        return content
    out = []
    for p in gemini_parts(content) if isinstance(content, dict) else []:
        if isinstance(p.get("text"), str) and not p.get("thought"):
            out.append(p["text"])
        elif results and isinstance(p.get("functionResponse"), dict):
            out.append(gemini_response_text(p["functionResponse"]))
    return "\n".join(out)


def gemini_has_results(content):
    return any(isinstance(p.get("functionResponse"), dict) for p in gemini_parts(content))


def tool_names(fmt, body):
    """Tool name -> declaration. Responses tools may also come in `additional_tools` input items
    (Codex) and inside `namespace` tools."""
    names = {}
    decls = list(body.get("tools") or [])
    if fmt == "gemini":
        decls = [d for t in decls if isinstance(t, dict) for d in t.get("functionDeclarations") or []]
    if fmt == "responses" and isinstance(body.get("input"), list):
        for it in body["input"]:
            if isinstance(it, dict) and it.get("type") == "additional_tools":
                decls += it.get("tools") or []

    def add(t):
        if not isinstance(t, dict):
            return
        if t.get("type") == "namespace":
            for sub in t.get("tools") or []:
                add(sub)
        elif fmt == "chat":
            fn = t.get("function") or {}
            if fn.get("name"):
                names[fn["name"]] = t
        elif t.get("name"):
            names[t["name"]] = t

    for t in decls:
        add(t)
    # Loom's own recall tool is not the client's: the task is played through the client's tools.
    names.pop("loom_recall", None)
    return names


def text_of(content):
    if isinstance(content, str):
        return content
    out = []
    for b in content or []:
        if isinstance(b, dict):
            for key in ("text", "content", "output"):
                v = b.get(key)
                if isinstance(v, str):
                    out.append(v)
                elif isinstance(v, list):
                    out.append(text_of(v))
    return "\n".join(out)


def tool_results(fmt, body):
    """The text of each tool result in the conversation, in order."""
    res = []
    if fmt == "anthropic":
        for m in body.get("messages") or []:
            if isinstance(m.get("content"), list):
                for b in m["content"]:
                    if isinstance(b, dict) and b.get("type") == "tool_result":
                        res.append(text_of(b.get("content")))
    elif fmt == "responses":
        items = body.get("input")
        if isinstance(items, list):
            for it in items:
                if isinstance(it, dict) and it.get("type") in ("function_call_output", "custom_tool_call_output"):
                    out = it.get("output")
                    res.append(out if isinstance(out, str) else text_of(out))
    elif fmt == "gemini":
        for c in gemini_contents(body):
            for p in gemini_parts(c):
                if isinstance(p.get("functionResponse"), dict):
                    res.append(gemini_response_text(p["functionResponse"]))
    else:
        for m in body.get("messages") or []:
            if m.get("role") == "tool":
                res.append(text_of(m.get("content")))
    return res


def all_text(fmt, body):
    parts = []
    if fmt == "anthropic":
        parts.append(text_of(body.get("system")))
        for m in body.get("messages") or []:
            parts.append(text_of(m.get("content")))
    elif fmt == "responses":
        parts.append(body.get("instructions") or "")
        items = body.get("input")
        if isinstance(items, str):
            parts.append(items)
        else:
            for it in items or []:
                if isinstance(it, dict):
                    parts.append(text_of(it.get("content")))
                    if isinstance(it.get("output"), str):
                        parts.append(it["output"])
    elif fmt == "gemini":
        parts.append(gemini_text(body.get("systemInstruction")))
        for c in gemini_contents(body):
            parts.append(gemini_text(c))
    else:
        for m in body.get("messages") or []:
            parts.append(text_of(m.get("content")))
    return "\n".join(p for p in parts if p)


def system_text(fmt, body):
    if fmt == "anthropic":
        return text_of(body.get("system"))
    if fmt == "responses":
        return body.get("instructions") or ""
    if fmt == "gemini":
        return gemini_text(body.get("systemInstruction"))
    return "\n".join(text_of(m.get("content")) for m in body.get("messages") or []
                     if m.get("role") in ("system", "developer"))


# Loom's compact block (loom-core's render::layout::COMPACT_HEADER): earlier steps, each a
# `[step_NNN] ...` line, in place of their calls and results.
COMPACT_HEADER = "Earlier steps, compacted (each original is recoverable by its reference):"
COMPACT_STEP = re.compile(r"^\[step_(\d+)\]", re.M)


def compacted_steps(fmt, body):
    """The number of steps a compact block in the request stands for."""
    text = all_text(fmt, body)
    if COMPACT_HEADER not in text:
        return 0
    return len(set(COMPACT_STEP.findall(text)))


# A client's own compaction (the `compact` scenario): the instruction that ends its summary
# request. The mock answers it with a summary (for Codex's `compaction_trigger`, one `compaction`
# item) and goes on from the step it last played (PLAYED), whatever the window after keeps.
SUMMARY_PROMPTS = ("CRITICAL: Respond with TEXT ONLY",                # Claude Code
                   "You are performing a CONTEXT CHECKPOINT COMPACTION",  # Codex, local
                   "Create a new anchored summary from the conversation history")  # opencode
# opencode's and aider's summarizers are requests of their own, given the conversation as text.
SUMMARY_AGENTS = ("You are a context summarization agent.",                      # opencode
                  "*Briefly* summarize this partial conversation about programming",  # aider
                  # Gemini CLI's chat compression: a summary request, then a verification one.
                  "distilling chat history into a structured XML <state_snapshot>")


def last_user_text(fmt, body):
    if fmt == "gemini":
        for c in reversed(gemini_contents(body)):
            if c.get("role") == "user":
                return "" if gemini_has_results(c) else gemini_text(c)
        return ""
    items = body.get("input") if fmt == "responses" else body.get("messages")
    if isinstance(items, str):
        return items
    for it in reversed(items or []):
        if isinstance(it, dict) and it.get("role") == "user":
            return text_of(it.get("content"))
        if isinstance(it, dict) and it.get("type") in ("function_call_output", "tool_result"):
            return ""
    return ""


def asks_for_summary(fmt, body):
    """Whether the request is a client's summary request, or Codex's v2 compaction (its input
    ends with a `compaction_trigger` item)."""
    items = body.get("input") if fmt == "responses" else None
    if isinstance(items, list) and items and isinstance(items[-1], dict) \
            and items[-1].get("type") == "compaction_trigger":
        return "trigger"
    text = last_user_text(fmt, body)
    system = system_text(fmt, body)
    if any(p in text for p in SUMMARY_PROMPTS) or any(a in system for a in SUMMARY_AGENTS):
        return "prompt"
    return None


# The compact scenario's one conversation: the step last played and the id of its call.
PLAYED = {"step": 0, "call": None}


def result_ids(fmt, body):
    """The call ids the conversation's tool results answer."""
    ids = set()
    if fmt == "responses":
        items = body.get("input")
        for it in items if isinstance(items, list) else []:
            if isinstance(it, dict) and it.get("type") in ("function_call_output", "custom_tool_call_output"):
                ids.add(it.get("call_id"))
    elif fmt == "gemini":
        for c in gemini_contents(body):
            ids.update(p["functionResponse"].get("id") for p in gemini_parts(c)
                       if isinstance(p.get("functionResponse"), dict))
    else:
        for m in body.get("messages") or []:
            if m.get("role") == "tool":
                ids.add(m.get("tool_call_id"))
            elif isinstance(m.get("content"), list):
                ids.update(b.get("tool_use_id") for b in m["content"]
                           if isinstance(b, dict) and b.get("type") == "tool_result")
    return ids


def summary_text(done, total):
    return ("<analysis>The task is being worked through step by step.</analysis>\n<summary>\n"
            f"1. Primary request: fix calc.py so that test_calc.py passes.\n"
            f"2. Progress: {done} of {total} steps done; "
            "continue with the next step.\n</summary>")


def conversation_seed(fmt, body):
    """Stable per conversation: the first user message's text."""
    if fmt == "responses":
        items = body.get("input")
        if isinstance(items, str):
            return items
        for it in items or []:
            if isinstance(it, dict) and it.get("role") == "user":
                return text_of(it.get("content"))
        return ""
    if fmt == "gemini":
        for c in gemini_contents(body):
            if c.get("role") == "user":
                return gemini_text(c)
        return ""
    for m in body.get("messages") or []:
        if m.get("role") == "user":
            return text_of(m.get("content"))
    return ""


WORKDIR_PATTERNS = [r"<cwd>([^<]+)</cwd>", r"Working directory: ([^\n\"\\<]+)",
                    r"working directory[^/\n]*?(/[^\s\"\\<]+)"]


def find_workdir(text, default):
    if default:
        return default
    for pat in WORKDIR_PATTERNS:
        m = re.search(pat, text)
        if m:
            return m.group(1).strip()
    return "."


def flavour(fmt, body, names):
    if fmt == "anthropic" and {"Bash", "Read", "Edit"} <= set(names):
        return "claude"
    if fmt == "responses" and ({"exec", "apply_patch", "shell", "exec_command", "shell_command"} & set(names)):
        return "codex"
    if fmt == "chat" and {"bash", "read", "edit"} <= set(names):
        return "opencode"
    if (fmt == "chat" and {"run_shell_command", "read_file", "edit"} <= set(names)
            and "You are Qwen Code" in system_text(fmt, body)):
        # qwen-code's main agent; its background subagents (the managed-memory extraction, with
        # read_file/edit/run_shell_command too) have other system prompts and get a side reply.
        return "qwen"
    if (fmt == "gemini" and {"run_shell_command", "read_file", "replace"} <= set(names)
            and "You are Gemini CLI" in system_text(fmt, body)):
        # Gemini CLI's main agent; its subagents (invoke_agent) have other system prompts.
        return "gemini"
    if fmt == "chat" and "bash" in names:
        return "mini"
    if fmt == "chat" and not names and "SEARCH/REPLACE" in system_text(fmt, body):
        return "aider"
    return None


# ----------------------------------------------------------------------------------------------
# The script per client.


def plan(fmt, body, scenario, workdir_default):
    """Returns (turn parts, note) for this request."""
    names = tool_names(fmt, body)
    kind = flavour(fmt, body, names)
    seed = conversation_seed(fmt, body)
    summary = asks_for_summary(fmt, body)
    if summary:
        done = PLAYED["step"]
        text = summary_text(done, len(steps(scenario)))
        if summary == "trigger":
            blob = base64.b64encode(text.encode()).decode()
            return [{"type": "compaction", "encrypted_content": blob}], f"summary:{done}"
        # A summarizer of its own (opencode's, without the client's tools) is a side conversation.
        note = "side-summary" if kind is None else "summary"
        return [{"type": "text", "text": text}], f"{note}:{done}"
    if kind is None:
        return side_reply(fmt, body), "side"
    if kind == "aider":
        return aider_turn(fmt, body, scenario, seed), "aider"
    results = tool_results(fmt, body)
    script = steps(scenario)
    # Steps Loom compacted into one block count as done (their calls and results are gone).
    # So do steps before the client's own compaction, as the mock's summary counted them.
    k = len(results) + compacted_steps(fmt, body)
    if scenario == "compact":
        # A client's compaction leaves no count to go by (its window may replay the latest
        # steps, or none): the step after the one last played once its result is back, else that
        # one again. A step may be played twice; none is skipped.
        if PLAYED["call"] is None:
            k = 0
        elif PLAYED["call"] in result_ids(fmt, body):
            k = PLAYED["step"] + 1
        else:
            k = PLAYED["step"]
    if k >= len(script):
        k = len(script) - 1
    step = script[k]
    workdir = find_workdir(all_text(fmt, body), workdir_default)
    if scenario == "recall":
        step = recall_step(fmt, body, results, script, k, step, workdir)
    sid = f"{seed}/{k}"
    parts = []
    if wants_thinking(fmt, body):
        text = f"Step {k + 1} of {len(script)}. " + describe(step)
        if fmt == "anthropic" and (body.get("thinking") or {}).get("display") == "omitted":
            text = ""  # the API streams no thinking text then, only the signature
        parts.append({"type": "thinking", "text": text, "signature": signature_for("sig/" + sid),
                      "id": "rs_" + digest("rs", sid)[:32]})
    if step[0] == "answer" and kind != "mini":
        parts.append({"type": "text", "text": FINAL_ANSWER})
        return parts, f"{kind}:{k}:answer"
    parts.append({"type": "text", "text": describe(step)} if step[0] != "answer"
                 else {"type": "text", "text": FINAL_ANSWER})
    call = tool_call(kind, fmt, names, step, workdir, sid)
    parts.append(call)
    PLAYED.update(step=k, call=call["id"])
    return parts, f"{kind}:{k}:{step[0]}"


# The `recall` scenario's record: every tool result the model was shown whole (by SHA-256), the
# file the stub named, and whether the client's read of it came back (written to recall.json in
# the record folder).
RECALL = {"seen": set(), "path": None, "record": None}
STUB_PATH = re.compile(r"\(See (/[^)\s]+)\)")


def recall_step(fmt, body, results, script, k, step, workdir):
    RECALL["seen"].update(hashlib.sha256(r.encode()).hexdigest() for r in results)
    at = next(i for i, s in enumerate(script) if s[0] == "reread")
    if k == at:
        named = STUB_PATH.findall(all_text(fmt, body))
        path = named[-1] if named else os.path.join(workdir, "notes/part_00.txt")
        RECALL["path"] = path
        return ("reread", path)
    if k == at + 1 and RECALL["path"] and RECALL["record"]:
        path = RECALL["path"]
        try:
            with open(path, encoding="utf-8") as f:
                original = f.read()
        except OSError as e:
            original, why = "", str(e)
        else:
            why = ""
        lines = [ln for ln in original.splitlines() if ln.strip()][:3]
        report = {
            "path": path,
            "stub": bool(STUB_PATH.findall(all_text(fmt, body))),
            "identical": hashlib.sha256(original.encode()).hexdigest() in RECALL["seen"],
            "read_back": bool(lines) and all(ln in results[-1] for ln in lines),
            "error": why,
        }
        with open(os.path.join(RECALL["record"], "recall.json"), "w") as f:
            json.dump(report, f, indent=1)
    return step


def wants_thinking(fmt, body):
    if fmt == "anthropic":
        t = body.get("thinking")
        return isinstance(t, dict) and t.get("type") in ("enabled", "adaptive")
    if fmt == "responses":
        return isinstance(body.get("reasoning"), dict) or "reasoning.encrypted_content" in (body.get("include") or [])
    if fmt == "gemini":
        return bool(((body.get("generationConfig") or {}).get("thinkingConfig") or {}).get("includeThoughts"))
    return False


def tool_call(kind, fmt, names, step, workdir, sid):
    op = step[0]
    prefix = {"anthropic": "toolu_", "responses": "call_", "chat": "call_", "gemini": "fc_"}[fmt]
    absolute = lambda p: os.path.join(workdir, p)
    if op == "reread":
        # An absolute path: the file tool of each client, or `cat`.
        if kind == "claude":
            return tool_part("Read", sid, {"file_path": step[1]}, prefix)
        if kind == "opencode":
            return tool_part("read", sid, {"filePath": step[1]}, prefix)
        if kind in ("qwen", "gemini"):
            return tool_part("read_file", sid, {"file_path": step[1]}, prefix)
        op, step = "read", ("read", step[1])
    if kind == "claude":
        if op == "list":
            return tool_part("Bash", sid, {"command": "ls -la", "description": "List files"}, prefix)
        if op == "read":
            return tool_part("Read", sid, {"file_path": absolute(step[1])}, prefix)
        if op == "edit":
            return tool_part("Edit", sid, {"file_path": absolute(step[1]), "old_string": step[2],
                                           "new_string": step[3], "replace_all": False}, prefix)
        return tool_part("Bash", sid, {"command": TEST_COMMAND, "description": "Run the test"}, prefix)
    if kind == "opencode":
        if op == "list":
            return tool_part("bash", sid, {"command": "ls -la", "description": "List files"}, prefix)
        if op == "read":
            return tool_part("read", sid, {"filePath": absolute(step[1])}, prefix)
        if op == "edit":
            return tool_part("edit", sid, {"filePath": absolute(step[1]), "oldString": step[2],
                                           "newString": step[3]}, prefix)
        return tool_part("bash", sid, {"command": TEST_COMMAND, "description": "Run the test"}, prefix)
    if kind == "qwen":
        if op == "list":
            return tool_part("run_shell_command", sid, {"command": "ls -la", "description": "List files"}, prefix)
        if op == "read":
            return tool_part("read_file", sid, {"file_path": absolute(step[1])}, prefix)
        if op == "edit":
            return tool_part("edit", sid, {"file_path": absolute(step[1]), "old_string": step[2],
                                           "new_string": step[3]}, prefix)
        return tool_part("run_shell_command", sid, {"command": TEST_COMMAND, "description": "Run the test"}, prefix)
    if kind == "gemini":
        if op == "list":
            return tool_part("run_shell_command", sid, {"command": "ls -la", "description": "List files"}, prefix)
        if op == "read":
            return tool_part("read_file", sid, {"file_path": absolute(step[1])}, prefix)
        if op == "edit":
            return tool_part("replace", sid, {"file_path": absolute(step[1]),
                                              "instruction": f"Replace `{step[2].strip()}` with `{step[3].strip()}`.",
                                              "old_string": step[2], "new_string": step[3]}, prefix)
        return tool_part("run_shell_command", sid, {"command": TEST_COMMAND, "description": "Run the test"}, prefix)
    # Shell-driven clients: codex and mini.
    if op == "list":
        cmd = "ls -la"
    elif op == "read":
        cmd = f"cat {step[1]}"
    elif op == "edit":
        if kind == "codex" and "apply_patch" in names:
            patch = apply_patch_text(step[1], step[2], step[3])
            t = names["apply_patch"]
            if t.get("type") == "custom":
                return {"type": "custom_tool", "name": "apply_patch",
                        "id": "call_" + digest(sid, "apply_patch")[:24], "input": patch}
            return tool_part("apply_patch", sid, {"input": patch}, prefix)
        cmd = python_replace_command(step[1], step[2], step[3])
    elif op == "test":
        cmd = TEST_COMMAND
    else:
        cmd = MINI_SUBMIT
    if kind == "mini":
        return tool_part("bash", sid, {"command": cmd}, prefix)
    if names.get("exec", {}).get("type") == "custom":
        # Codex's code mode: one freeform tool running JavaScript that calls the nested tools.
        if op == "edit":
            js = (f"const r = await tools.apply_patch({json.dumps(apply_patch_text(step[1], step[2], step[3]))});\n"
                  "text(r);\n")
        else:
            js = (f"const r = await tools.exec_command({{cmd: {json.dumps(cmd)}}});\n"
                  "text(`exit ${r.exit_code}\\n${r.output}`);\n")
        return {"type": "custom_tool", "name": "exec", "id": "call_" + digest(sid, "exec")[:24], "input": js}
    if "exec_command" in names:
        return tool_part("exec_command", sid, {"cmd": cmd, "workdir": workdir}, prefix)
    if "shell_command" in names:
        return tool_part("shell_command", sid, {"command": cmd, "workdir": workdir}, prefix)
    return tool_part("shell", sid, {"command": ["bash", "-lc", cmd], "workdir": workdir}, prefix)


def search_replace(path, old, new):
    return f"{path}\n```python\n<<<<<<< SEARCH\n{old}\n=======\n{new}\n>>>>>>> REPLACE\n```\n"


def aider_turn(fmt, body, scenario, seed):
    """aider has no tools: it applies SEARCH/REPLACE blocks from the reply text, runs the test
    (--auto-test) and, when it fails, sends its output back. The first reply fixes add (and sets
    the constants in `edits`); the failing mul test comes back and the second reply fixes mul."""
    msgs = body.get("messages") or []
    last_user = ""
    for m in msgs:
        if m.get("role") == "user":
            last_user = text_of(m.get("content"))
    if "mul(2, 3) returned" in last_user:
        text = "The test shows mul is still wrong. Here is the fix:\n\n" + search_replace("calc.py", *BUG_MUL)
    elif any(m.get("role") == "assistant" for m in msgs if "SEARCH" in text_of(m.get("content"))):
        text = FINAL_ANSWER
    else:
        blocks = []
        if scenario == "edits":
            blocks += [search_replace("calc.py", f"K{i:03d} = 0  # set me", f"K{i:03d} = {i}")
                       for i in range(EDITS_CONSTANTS)]
        blocks.append(search_replace("calc.py", *BUG_ADD))
        text = "add subtracts instead of adding. Here is the fix:\n\n" + "\n".join(blocks)
    return [{"type": "text", "text": text}]


# Gemini CLI's JSON side requests (generationConfig.responseJsonSchema): the answers that let it
# go on with its default model: the router's complexity score (at or over its threshold: the Pro
# model), the next-speaker check (the user: the turn is over), the loop check (no loop).
SCHEMA_ANSWERS = {"complexity_score": 90, "next_speaker": "user", "unproductive_state_confidence": 0}


def schema_value(schema, name=None):
    """A value that satisfies a JSON schema (OpenAPI-style upper-case types too)."""
    if name in SCHEMA_ANSWERS:
        return SCHEMA_ANSWERS[name]
    if not isinstance(schema, dict):
        return "OK."
    if schema.get("enum"):
        return schema["enum"][0]
    t = schema.get("type")
    if isinstance(t, list):
        t = next((x for x in t if str(x).lower() != "null"), "string")
    t = str(t or ("object" if "properties" in schema else "string")).lower()
    if t == "object":
        props = schema.get("properties") or {}
        return {k: schema_value(props[k], k) for k in (schema.get("required") or list(props)) if k in props}
    if t == "array":
        return [schema_value(schema["items"])] * int(schema.get("minItems") or 0) if "items" in schema else []
    if t in ("integer", "number"):
        return schema.get("minimum", 0)
    if t == "boolean":
        return False
    return "OK."


def side_reply(fmt, body):
    if fmt == "gemini":
        gc = body.get("generationConfig") or {}
        if gc.get("responseMimeType") == "application/json":
            schema = gc.get("responseJsonSchema") or gc.get("responseSchema")
            return [{"type": "text", "text": json.dumps(schema_value(schema))}]
    sys_text = system_text(fmt, body).lower()
    if "commit message" in sys_text:
        return [{"type": "text", "text": "fix: correct add and mul in calc.py"}]
    if "title" in sys_text:
        return [{"type": "text", "text": "Fix calc bugs"}]
    return [{"type": "text", "text": "OK."}]


# ----------------------------------------------------------------------------------------------
# Encoders: a turn in each wire format, streamed or not.


def approx_tokens(raw):
    return max(1, len(raw) // 4)


def chunks(s, n=24):
    return [s[i:i + n] for i in range(0, len(s), n)] or [""]


def anthropic_events(turn, model, in_tok, msg_id):
    stop = "tool_use" if any(p["type"] == "tool" for p in turn) else "end_turn"
    out_tok = sum(approx_tokens(json.dumps(p)) for p in turn)
    usage0 = {"input_tokens": in_tok, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
              "output_tokens": 1, "service_tier": "standard"}
    ev = [("message_start", {"type": "message_start", "message": {
        "id": msg_id, "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": usage0}})]
    ev.append(("ping", {"type": "ping"}))
    for i, p in enumerate(turn):
        if p["type"] == "thinking":
            ev.append(("content_block_start", {"type": "content_block_start", "index": i,
                                               "content_block": {"type": "thinking", "thinking": "", "signature": ""}}))
            for c in chunks(p["text"]) if p["text"] else []:
                ev.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                                   "delta": {"type": "thinking_delta", "thinking": c}}))
            ev.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                               "delta": {"type": "signature_delta", "signature": p["signature"]}}))
        elif p["type"] == "text":
            ev.append(("content_block_start", {"type": "content_block_start", "index": i,
                                               "content_block": {"type": "text", "text": ""}}))
            for c in chunks(p["text"]):
                ev.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                                   "delta": {"type": "text_delta", "text": c}}))
        else:
            ev.append(("content_block_start", {"type": "content_block_start", "index": i,
                                               "content_block": {"type": "tool_use", "id": p["id"], "name": p["name"], "input": {}}}))
            ev.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                               "delta": {"type": "input_json_delta", "partial_json": ""}}))
            for c in chunks(json.dumps(p["input"])):
                ev.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                                   "delta": {"type": "input_json_delta", "partial_json": c}}))
        ev.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    ev.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                 "usage": {"input_tokens": in_tok, "cache_creation_input_tokens": 0,
                                           "cache_read_input_tokens": 0, "output_tokens": out_tok}}))
    ev.append(("message_stop", {"type": "message_stop"}))
    return ev


def anthropic_message(turn, model, in_tok, msg_id):
    content = []
    for p in turn:
        if p["type"] == "thinking":
            content.append({"type": "thinking", "thinking": p["text"], "signature": p["signature"]})
        elif p["type"] == "text":
            content.append({"type": "text", "text": p["text"]})
        else:
            content.append({"type": "tool_use", "id": p["id"], "name": p["name"], "input": p["input"]})
    stop = "tool_use" if any(p["type"] == "tool" for p in turn) else "end_turn"
    return {"id": msg_id, "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": in_tok, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                      "output_tokens": sum(approx_tokens(json.dumps(p)) for p in turn), "service_tier": "standard"}}


def responses_items(turn, encrypted):
    items = []
    for p in turn:
        if p["type"] == "thinking":
            it = {"id": p["id"], "type": "reasoning", "summary": [{"type": "summary_text", "text": p["text"]}]}
            if encrypted:
                it["encrypted_content"] = p["signature"]
            items.append(it)
        elif p["type"] == "text":
            items.append({"id": "msg_" + digest("msg", p["text"], len(items))[:32], "type": "message",
                          "status": "completed", "role": "assistant",
                          "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": p["text"]}]})
        elif p["type"] == "compaction":
            # Codex's v2 compaction: one opaque item the client sends back in place of the history.
            items.append({"id": "cmp_" + digest("cmp", p["encrypted_content"])[:32], "type": "compaction",
                          "encrypted_content": p["encrypted_content"]})
        elif p["type"] == "custom_tool":
            items.append({"id": "ctc_" + digest("ctc", p["id"])[:32], "type": "custom_tool_call",
                          "status": "completed", "call_id": p["id"], "name": p["name"], "input": p["input"]})
        else:
            items.append({"id": "fc_" + digest("fc", p["id"])[:32], "type": "function_call", "status": "completed",
                          "arguments": json.dumps(p["input"]), "call_id": p["id"], "name": p["name"]})
    return items


def responses_object(body, resp_id, created, status, output, usage):
    return {"id": resp_id, "object": "response", "created_at": created, "status": status,
            "background": False, "error": None, "incomplete_details": None,
            "instructions": body.get("instructions"), "max_output_tokens": body.get("max_output_tokens"),
            "model": body.get("model"), "output": output, "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": body.get("previous_response_id"),
            "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
            "store": body.get("store", True), "temperature": 1.0, "text": {"format": {"type": "text"}},
            "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools") or [], "top_p": 1.0,
            "truncation": "disabled", "usage": usage, "user": None, "metadata": {}}


def responses_usage(in_tok, turn):
    out_tok = sum(approx_tokens(json.dumps(p)) for p in turn)
    reasoning = sum(approx_tokens(p["text"]) for p in turn if p["type"] == "thinking")
    return {"input_tokens": in_tok, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": out_tok, "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": in_tok + out_tok}


def responses_events(turn, body, in_tok, resp_id, created, encrypted):
    ev, seq = [], [0]

    def add(kind, payload):
        payload = dict({"type": kind}, **payload, sequence_number=seq[0])
        seq[0] += 1
        ev.append((kind, payload))

    add("response.created", {"response": responses_object(body, resp_id, created, "in_progress", [], None)})
    add("response.in_progress", {"response": responses_object(body, resp_id, created, "in_progress", [], None)})
    items = responses_items(turn, encrypted)
    for idx, it in enumerate(items):
        if it["type"] == "reasoning":
            added = {"id": it["id"], "type": "reasoning", "summary": []}
            if encrypted:
                added["encrypted_content"] = it["encrypted_content"]
            add("response.output_item.added", {"output_index": idx, "item": added})
            text = it["summary"][0]["text"]
            add("response.reasoning_summary_part.added", {"item_id": it["id"], "output_index": idx, "summary_index": 0,
                                                          "part": {"type": "summary_text", "text": ""}})
            for c in chunks(text):
                add("response.reasoning_summary_text.delta", {"item_id": it["id"], "output_index": idx,
                                                              "summary_index": 0, "delta": c, "obfuscation": "x"})
            add("response.reasoning_summary_text.done", {"item_id": it["id"], "output_index": idx,
                                                         "summary_index": 0, "text": text})
            add("response.reasoning_summary_part.done", {"item_id": it["id"], "output_index": idx, "summary_index": 0,
                                                         "part": {"type": "summary_text", "text": text}})
        elif it["type"] == "message":
            text = it["content"][0]["text"]
            add("response.output_item.added", {"output_index": idx, "item": {
                "id": it["id"], "type": "message", "status": "in_progress", "content": [], "role": "assistant"}})
            add("response.content_part.added", {"item_id": it["id"], "output_index": idx, "content_index": 0,
                                                "part": {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}})
            for c in chunks(text):
                add("response.output_text.delta", {"item_id": it["id"], "output_index": idx, "content_index": 0,
                                                   "delta": c, "logprobs": [], "obfuscation": "x"})
            add("response.output_text.done", {"item_id": it["id"], "output_index": idx, "content_index": 0,
                                              "text": text, "logprobs": []})
            add("response.content_part.done", {"item_id": it["id"], "output_index": idx, "content_index": 0,
                                               "part": {"type": "output_text", "annotations": [], "logprobs": [], "text": text}})
        elif it["type"] == "compaction":
            add("response.output_item.added", {"output_index": idx, "item": it})
        elif it["type"] == "custom_tool_call":
            add("response.output_item.added", {"output_index": idx, "item": dict(it, status="in_progress", input="")})
            for c in chunks(it["input"]):
                add("response.custom_tool_call_input.delta", {"item_id": it["id"], "output_index": idx, "delta": c})
            add("response.custom_tool_call_input.done", {"item_id": it["id"], "output_index": idx, "input": it["input"]})
        else:
            add("response.output_item.added", {"output_index": idx, "item": dict(it, status="in_progress", arguments="")})
            for c in chunks(it["arguments"]):
                add("response.function_call_arguments.delta", {"item_id": it["id"], "output_index": idx, "delta": c})
            add("response.function_call_arguments.done", {"item_id": it["id"], "output_index": idx,
                                                          "arguments": it["arguments"]})
        add("response.output_item.done", {"output_index": idx, "item": it})
    add("response.completed", {"response": responses_object(body, resp_id, created, "completed", items,
                                                             responses_usage(in_tok, turn))})
    return ev


def chat_message(turn):
    msg = {"role": "assistant", "content": None, "refusal": None, "annotations": []}
    texts = [p["text"] for p in turn if p["type"] == "text"]
    if texts:
        msg["content"] = "\n\n".join(texts)
    calls = [p for p in turn if p["type"] == "tool"]
    if calls:
        msg["tool_calls"] = [{"id": p["id"], "type": "function",
                              "function": {"name": p["name"], "arguments": json.dumps(p["input"])}} for p in calls]
    return msg


def chat_usage(in_tok, turn):
    out_tok = sum(approx_tokens(json.dumps(p)) for p in turn)
    return {"prompt_tokens": in_tok, "completion_tokens": out_tok, "total_tokens": in_tok + out_tok,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                          "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}


def chat_chunks(turn, body, in_tok, cid, created):
    model = body.get("model")
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    finish = "tool_calls" if any(p["type"] == "tool" for p in turn) else "stop"
    out = []

    def chunk(delta, finish_reason=None):
        c = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
             "service_tier": "default", "system_fingerprint": "fp_loommock",
             "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]}
        if include_usage:
            c["usage"] = None
        out.append(c)

    chunk({"role": "assistant", "content": "", "refusal": None})
    texts = [p["text"] for p in turn if p["type"] == "text"]
    for c in chunks("\n\n".join(texts)) if texts else []:
        chunk({"content": c})
    for n, p in enumerate(p for p in turn if p["type"] == "tool"):
        chunk({"tool_calls": [{"index": n, "id": p["id"], "type": "function",
                               "function": {"name": p["name"], "arguments": ""}}]})
        for c in chunks(json.dumps(p["input"])):
            chunk({"tool_calls": [{"index": n, "function": {"arguments": c}}]})
    chunk({}, finish)
    if include_usage:
        out.append({"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                    "service_tier": "default", "system_fingerprint": "fp_loommock", "choices": [],
                    "usage": chat_usage(in_tok, turn)})
    return out


def gemini_sign(turn, sid):
    """Gemini's thought signature: on the first functionCall of the turn, else (when it thought) on
    its last text part; the thinking part's signature, or one of the call's own. Kept in the turn
    (`signature`) so that the reply's record says what was sent."""
    think = next((p for p in turn if p["type"] == "thinking"), None)
    call = next((p for p in turn if p["type"] == "tool"), None)
    texts = [p for p in turn if p["type"] == "text"]
    target = call or (texts[-1] if think and texts else None)
    if target is not None:
        target["signature"] = think["signature"] if think else signature_for("sig/" + (call["id"] if call else sid))
    return turn


def gemini_usage(in_tok, turn, final=True):
    """usageMetadata: thoughts apart from the candidates, as the API counts them."""
    u = {"promptTokenCount": in_tok}
    if final:
        out_tok = sum(approx_tokens(json.dumps(p)) for p in turn if p["type"] != "thinking")
        thoughts = sum(approx_tokens(json.dumps(p)) for p in turn if p["type"] == "thinking")
        u["candidatesTokenCount"] = out_tok
        u["totalTokenCount"] = in_tok + out_tok + thoughts
        if thoughts:
            u["thoughtsTokenCount"] = thoughts
    else:
        u["totalTokenCount"] = in_tok
    u["promptTokensDetails"] = [{"modality": "TEXT", "tokenCount": in_tok}]
    return u


def gemini_part_list(turn, stream):
    """The turn's parts, in order; streamed, text split in chunks (the signature on the last)."""
    out = []
    for p in turn:
        if p["type"] == "thinking":
            if p["text"]:
                out += [{"text": c, "thought": True} for c in (chunks(p["text"]) if stream else [p["text"]])]
        elif p["type"] == "text":
            out += [{"text": c} for c in (chunks(p["text"]) if stream else [p["text"]])]
            if p.get("signature"):
                out[-1]["thoughtSignature"] = p["signature"]
        elif p["type"] == "tool":
            part = {"functionCall": {"id": p["id"], "name": p["name"], "args": p["input"]}}
            if p.get("signature"):
                part["thoughtSignature"] = p["signature"]
            out.append(part)
    return out


def gemini_response(parts, model, resp_id, usage, finish):
    cand = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if finish:
        cand["finishReason"] = "STOP"
    return {"candidates": [cand], "usageMetadata": usage, "modelVersion": model, "responseId": resp_id}


def gemini_frames(turn, model, in_tok, resp_id):
    """streamGenerateContent?alt=sse: every frame a whole GenerateContentResponse, one part each
    (a functionCall whole), the last with finishReason and the final usage; no [DONE]."""
    parts = gemini_part_list(turn, True) or [{"text": ""}]
    return [gemini_response([p], model, resp_id, gemini_usage(in_tok, turn, i == len(parts) - 1),
                            i == len(parts) - 1) for i, p in enumerate(parts)]


def gemini_unsigned_call(body):
    """The API's rule (400 without it): in the current turn (since the last user text), the first
    functionCall part of every model content carries a thoughtSignature. Returns where it is
    missing, or None."""
    contents = gemini_contents(body)
    start = 0
    for i, c in enumerate(contents):
        if c.get("role") == "user" and not gemini_has_results(c) and gemini_text(c):
            start = i
    for i in range(start, len(contents)):
        c = contents[i]
        if c.get("role") != "model":
            continue
        calls = [(j, p) for j, p in enumerate(gemini_parts(c)) if isinstance(p.get("functionCall"), dict)]
        if calls and not calls[0][1].get("thoughtSignature"):
            return f"contents[{i}].parts[{calls[0][0]}]"
    return None


# ----------------------------------------------------------------------------------------------
# The server.


class State:
    def __init__(self, record, scenario, workdir, delay):
        self.record = record
        self.scenario = scenario
        self.workdir = workdir
        self.delay = delay
        self.lock = threading.Lock()
        self.seq = 0
        os.makedirs(record, exist_ok=True)

    def next_seq(self):
        with self.lock:
            self.seq += 1
            return self.seq


def decode_body(raw, encoding):
    encoding = (encoding or "").lower()
    if encoding == "gzip":
        return gzip.decompress(raw)
    if encoding == "deflate":
        return zlib.decompress(raw)
    if encoding == "zstd":
        try:
            import zstandard  # noqa: optional
            return zstandard.ZstdDecompressor().decompressobj().decompress(raw)
        except ImportError:
            raise ValueError("zstd request body and no zstandard module")
    return raw


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "loom-clients-mock/1"
    state: State = None

    def log_message(self, fmt, *args):
        sys.stderr.write("mock: " + (fmt % args) + "\n")

    def read_body(self):
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            data = b""
            while True:
                line = self.rfile.readline()
                n = int(line.split(b";")[0].strip() or b"0", 16)
                if n == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return data
                data += self.rfile.read(n)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def record_request(self, raw):
        st = self.state
        seq = st.next_seq()
        url = urllib.parse.urlsplit(self.path)
        rec = {"seq": seq, "time": time.time(), "method": self.command, "path": url.path, "query": url.query,
               "headers": [[k, v] for k, v in self.headers.items()]}
        try:
            rec["body_raw"] = raw.decode("utf-8")
        except UnicodeDecodeError:
            rec["body_base64"] = base64.b64encode(raw).decode()
        with open(os.path.join(st.record, f"{seq:04d}.json"), "w") as f:
            json.dump(rec, f, ensure_ascii=False)
        return seq, url

    def record_reply(self, seq, status, note, turn, sent):
        rec = {"seq": seq, "status": status, "note": note, "turn": turn,
               "sent": sent.decode("utf-8", "replace")}
        with open(os.path.join(self.state.record, f"{seq:04d}.reply.json"), "w") as f:
            json.dump(rec, f, ensure_ascii=False)

    def do_GET(self):
        seq, url = self.record_request(b"")
        if url.path.rstrip("/").endswith("/models"):
            data = [{"id": m, "object": "model", "created": 1700000000, "owned_by": "loom-mock",
                     "type": "model", "display_name": m, "created_at": "2025-01-01T00:00:00Z"}
                    for m in ("gpt-5", "gpt-4o", "claude-sonnet-4-5")]
            self.send_json(seq, 200, {"object": "list", "data": data, "has_more": False,
                                      "first_id": data[0]["id"], "last_id": data[-1]["id"]}, "models")
        else:
            self.send_json(seq, 404, {"error": {"message": f"no route {url.path}", "type": "not_found"}}, "404")

    def do_HEAD(self):
        seq, _ = self.record_request(b"")
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
        self.record_reply(seq, 200, "head", None, b"")

    def do_POST(self):
        raw = self.read_body()
        seq, url = self.record_request(raw)
        try:
            body = json.loads(decode_body(raw, self.headers.get("Content-Encoding")) or b"{}")
        except Exception as e:  # noqa: broad, reported to the client
            self.send_json(seq, 400, {"error": {"message": f"mock: bad body: {e}", "type": "invalid_request_error"}}, "bad body")
            return
        path = url.path
        if self.state.delay:
            time.sleep(self.state.delay)
        gemini = GEMINI_ROUTE.search(path)
        if gemini:
            self.handle_gemini(seq, body, raw, gemini.group(1), gemini.group(2))
        elif path.endswith("/messages/count_tokens"):
            self.send_json(seq, 200, {"input_tokens": approx_tokens(raw)}, "count_tokens")
        elif path.endswith("/messages"):
            self.handle_anthropic(seq, body, raw)
        elif path.endswith("/responses"):
            self.handle_responses(seq, body, raw)
        elif path.endswith("/chat/completions"):
            self.handle_chat(seq, body, raw)
        else:
            self.send_json(seq, 404, {"error": {"message": f"no route {path}", "type": "not_found"}}, "404")

    # -- replies

    def send_json(self, seq, status, obj, note, turn=None):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", f"req_mock{seq:06d}")
        self.end_headers()
        self.wfile.write(data)
        self.record_reply(seq, status, note, turn, data)

    def send_sse(self, seq, events, note, turn, done_marker=False):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("request-id", f"req_mock{seq:06d}")
        self.end_headers()
        sent = bytearray()

        def write(b):
            sent.extend(b)
            self.wfile.write(f"{len(b):x}\r\n".encode() + b + b"\r\n")
            self.wfile.flush()

        for name, payload in events:
            if name is None:
                write(b"data: " + json.dumps(payload).encode() + b"\n\n")
            else:
                write(f"event: {name}\n".encode() + b"data: " + json.dumps(payload).encode() + b"\n\n")
        if done_marker:
            write(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        self.record_reply(seq, 200, note, turn, bytes(sent))

    def handle_anthropic(self, seq, body, raw):
        turn, note = plan("anthropic", body, self.state.scenario, self.state.workdir)
        model = body.get("model") or "claude"
        msg_id = "msg_" + digest("msg", seq, raw[:256])[:24]
        in_tok = approx_tokens(raw)
        if body.get("stream"):
            self.send_sse(seq, anthropic_events(turn, model, in_tok, msg_id), note, turn)
        else:
            self.send_json(seq, 200, anthropic_message(turn, model, in_tok, msg_id), note, turn)

    def handle_responses(self, seq, body, raw):
        turn, note = plan("responses", body, self.state.scenario, self.state.workdir)
        encrypted = "reasoning.encrypted_content" in (body.get("include") or [])
        resp_id = "resp_" + digest("resp", seq, raw[:256])[:32]
        created = int(time.time())
        in_tok = approx_tokens(raw)
        if body.get("stream"):
            self.send_sse(seq, responses_events(turn, body, in_tok, resp_id, created, encrypted), note, turn)
        else:
            self.send_json(seq, 200, responses_object(body, resp_id, created, "completed",
                                                      responses_items(turn, encrypted),
                                                      responses_usage(in_tok, turn)), note, turn)

    def handle_gemini(self, seq, body, raw, model, method):
        if method == "countTokens":
            self.send_json(seq, 200, {"totalTokens": approx_tokens(raw)}, "count_tokens")
            return
        where = gemini_unsigned_call(body)
        if where:
            self.send_json(seq, 400, {"error": {
                "code": 400, "status": "INVALID_ARGUMENT",
                "message": f"Function call is missing a thought_signature in functionCall parts ({where})."}},
                "unsigned call")
            return
        turn, note = plan("gemini", body, self.state.scenario, self.state.workdir)
        turn = gemini_sign(turn, digest("gemini", seq, note, raw[:256]))
        resp_id = digest("gemini-resp", seq, raw[:256])[:22]
        in_tok = approx_tokens(raw)
        if method == "streamGenerateContent":
            self.send_sse(seq, [(None, f) for f in gemini_frames(turn, model, in_tok, resp_id)], note, turn)
        else:
            self.send_json(seq, 200, gemini_response(gemini_part_list(turn, False), model, resp_id,
                                                     gemini_usage(in_tok, turn), True), note, turn)

    def handle_chat(self, seq, body, raw):
        turn, note = plan("chat", body, self.state.scenario, self.state.workdir)
        cid = "chatcmpl-" + digest("chat", seq, raw[:256])[:24]
        created = int(time.time())
        in_tok = approx_tokens(raw)
        if body.get("stream"):
            self.send_sse(seq, [(None, c) for c in chat_chunks(turn, body, in_tok, cid, created)], note, turn,
                          done_marker=True)
        else:
            finish = "tool_calls" if any(p["type"] == "tool" for p in turn) else "stop"
            self.send_json(seq, 200, {"id": cid, "object": "chat.completion", "created": created,
                                      "model": body.get("model"), "service_tier": "default",
                                      "system_fingerprint": "fp_loommock",
                                      "choices": [{"index": 0, "message": chat_message(turn), "logprobs": None,
                                                   "finish_reason": finish}],
                                      "usage": chat_usage(in_tok, turn)}, note, turn)


def serve(args):
    Handler.state = State(args.record, args.scenario, args.workdir, args.delay)
    RECALL["record"] = args.record
    host, _, port = args.listen.rpartition(":")
    server = http.server.ThreadingHTTPServer((host or "127.0.0.1", int(port)), Handler)
    server.daemon_threads = True
    addr = server.server_address
    print(f"listening on http://{addr[0]}:{addr[1]}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


# ----------------------------------------------------------------------------------------------
# Exporting recorded requests as fixtures.

REDACT = {"authorization", "x-api-key", "api-key", "cookie", "proxy-authorization", "chatgpt-account-id",
          "x-goog-api-key"}


def load_record(path):
    with open(path) as f:
        rec = json.load(f)
    raw = rec.get("body_raw")
    if raw is None and "body_base64" in rec:
        raw = base64.b64decode(rec["body_base64"]).decode("utf-8", "replace")
    rec["raw"] = raw or ""
    return rec


def export(args):
    files = sorted(f for f in os.listdir(args.record) if re.fullmatch(r"\d{4}\.json", f))
    os.makedirs(args.out, exist_ok=True)
    for old in os.listdir(args.out):
        if re.fullmatch(r"\d{3}\.json", old):
            os.remove(os.path.join(args.out, old))
    n = size = 0
    for name in files:
        if args.limit and n >= args.limit:
            break
        rec = load_record(os.path.join(args.record, name))
        size += len(rec["raw"])
        if n and args.max_bytes and size > args.max_bytes:
            break
        headers = {}
        for k, v in rec["headers"]:
            k = k.lower()
            if k in REDACT:
                v = "<redacted>"
            headers[k] = headers[k] + ", " + v if k in headers else v
        fx = {"method": rec["method"], "path": rec["path"], "query": rec["query"], "headers": headers}
        raw = rec["raw"]
        try:
            body = json.loads(raw) if raw else None
            fx["body"] = body
            if raw and json.dumps(body, ensure_ascii=False, separators=(",", ":")) != raw:
                fx["body_raw"] = raw
        except ValueError:
            fx["body_raw"] = raw
        n += 1
        # One key a line; the body on one line, compact, so that re-serialising it as
        # json.dumps(body, ensure_ascii=False, separators=(",", ":")) gives the bytes the client
        # sent (body_raw holds them when it does not).
        lines = [f" {json.dumps(k)}: {json.dumps(v, ensure_ascii=False, separators=(',', ':'))}"
                 for k, v in fx.items()]
        with open(os.path.join(args.out, f"{n:03d}.json"), "w") as f:
            f.write("{\n" + ",\n".join(lines) + "\n}\n")
    print(f"exported {n} requests to {args.out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--listen", default="127.0.0.1:0")
    s.add_argument("--record", required=True)
    s.add_argument("--scenario", choices=SCENARIOS, default="short")
    s.add_argument("--workdir", default=None, help="the scratch repo (else read from the request)")
    s.add_argument("--delay", type=float, default=0.0)
    m = sub.add_parser("make-repo")
    m.add_argument("dir")
    m.add_argument("--scenario", choices=SCENARIOS, default="short")
    v = sub.add_parser("verify-repo")
    v.add_argument("dir")
    v.add_argument("--scenario", choices=SCENARIOS, default="short")
    e = sub.add_parser("export")
    e.add_argument("record")
    e.add_argument("out")
    e.add_argument("--limit", type=int, default=0, help="requests kept at most (0: all)")
    e.add_argument("--max-bytes", type=int, default=1_500_000,
                   help="stop before the bodies kept pass this size (the first is always kept)")
    args = ap.parse_args()
    if args.cmd == "serve":
        serve(args)
    elif args.cmd == "make-repo":
        make_repo(args.dir, args.scenario)
    elif args.cmd == "verify-repo":
        ok, why = verify_repo(args.dir, args.scenario)
        print(why)
        sys.exit(0 if ok else 1)
    else:
        export(args)


if __name__ == "__main__":
    main()
