#!/usr/bin/env python3
"""The sliding-window replay of `loom replay`, done with LangChain's `trim_messages`.

For every trajectory of every file in ../shared/traces and every assistant message m_k (k > 0,
as `loom replay` counts calls), the request is messages[:k] as LangChain message objects
(SystemMessage, HumanMessage, AIMessage with tool_calls, ToolMessage), trimmed with

    trim_messages(msgs, strategy="last", start_on="human", include_system=True,
                  max_tokens=budget - 3, token_counter=count_message)

where `count_message` is OpenAI's documented chat rule on the message's OpenAI wire form, with
tiktoken's o200k_base: 3 per message + the tokens of every string value (role, content, name,
tool_call_id, and each tool call's id, type, function name and arguments) + 1 per name. A request
costs 3 more tokens (reply priming), which is why max_tokens is the budget less 3 and why 3 is
added to every kept request. This is the rule loom-core's `message_tokens` applies, so the totals
printed here are comparable to the `window` rows of `loom replay ... --budget N`.

The counter takes one `BaseMessage` (its annotation says so), so LangChain sums it over the
messages it considers, as it does for any per-message counter: nothing is cached between calls or
between the prefixes its binary search tries. `--memo` caches each message's count for the
trajectory (what a careful user could add); the figures in docs/performance.md give both.

The raw tool calls stay in `additional_kwargs["tool_calls"]`, as LangChain's OpenAI integration
keeps them, so the counter counts the exact argument strings of the trace (re-serialising the
parsed `args` would change spacing and escaping, and with them the counts).

tiktoken cannot download its vocabularies here; the cache is prepared from the Rust crate's copy
exactly as scripts/tiktoken_fixture.py does (needs `cargo fetch` once).

Setup (once): python3 -m venv .venv && .venv/bin/pip install langchain-core tiktoken && cargo fetch
Run:          .venv/bin/python scripts/langchain_replay.py [--budget 16000] [--memo] [FILE...]
"""

import argparse
import glob
import json
import os
import sys
import time

sys.dont_write_bytecode = True  # no scripts/__pycache__ from the import below
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiktoken_fixture import DEFAULT_TRACES, find_vocab_dir, prepare_cache  # noqa: E402

REQUEST_PRIMING = 3
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
ROLES = {"system": "system", "human": "user", "ai": "assistant", "tool": "tool"}


def to_langchain(message, lc):
    """One OpenAI Chat message as a LangChain message."""
    role = message["role"]
    content = message.get("content")
    if content is None:
        content = ""
    extra = {"name": message["name"]} if isinstance(message.get("name"), str) else {}
    if role == "system":
        return lc.SystemMessage(content=content, **extra)
    if role == "user":
        return lc.HumanMessage(content=content, **extra)
    if role == "tool":
        return lc.ToolMessage(content=content, tool_call_id=message["tool_call_id"], **extra)
    if role == "assistant":
        raw = message.get("tool_calls") or []
        calls = [
            {"name": c["function"]["name"], "args": json.loads(c["function"]["arguments"] or "{}"), "id": c["id"]}
            for c in raw
        ]
        kwargs = {"tool_calls": raw} if raw else {}
        return lc.AIMessage(content=content, tool_calls=calls, additional_kwargs=kwargs, **extra)
    raise ValueError(f"unknown role {role!r}")


def make_counter(enc, lc):
    """OpenAI's per-message rule over the message's wire form, counted with `enc`."""
    encode = enc.encode_ordinary

    def text_tokens(content):
        if isinstance(content, str):
            return len(encode(content))
        # Content parts: every string value of every part (type names included).
        total = 0
        for part in content:
            if isinstance(part, str):
                total += len(encode(part))
            else:
                total += sum(len(encode(v)) for v in part.values() if isinstance(v, str))
        return total

    # Annotated with BaseMessage so trim_messages treats it as a per-message counter; no
    # `from __future__ import annotations` in this file, or the annotation would be a string.
    def count_message(message: lc.BaseMessage) -> int:
        n = TOKENS_PER_MESSAGE + len(encode(ROLES[message.type])) + text_tokens(message.content)
        if message.name:
            n += len(encode(message.name)) + TOKENS_PER_NAME
        if message.type == "ai":
            for call in message.additional_kwargs.get("tool_calls", ()):
                n += len(encode(call["id"])) + len(encode(call["type"]))
                n += len(encode(call["function"]["name"])) + len(encode(call["function"]["arguments"]))
        elif message.type == "tool":
            n += len(encode(message.tool_call_id))
        return n

    return count_message


def memoized(count, lc):
    """`count` cached per message object (objects live as long as their trajectory)."""
    cache = {}

    def count_message(message: lc.BaseMessage) -> int:
        key = id(message)
        hit = cache.get(key)
        if hit is None:
            hit = cache[key] = count(message)
        return hit

    return count_message


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*", help="trace files (default: every ../shared/traces/*.jsonl)")
    parser.add_argument("--budget", type=int, default=16000)
    parser.add_argument("--memo", action="store_true", help="cache each message's count per trajectory")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--vocab-dir", default=None, help="folder with <encoding>.tiktoken.gz files")
    args = parser.parse_args()
    prepare_cache(args.vocab_dir or find_vocab_dir())
    import tiktoken  # after TIKTOKEN_CACHE_DIR is set
    import langchain_core
    import langchain_core.messages as lc
    from langchain_core.messages import trim_messages

    enc = tiktoken.get_encoding("o200k_base")
    base_count = make_counter(enc, lc)
    files = args.files or sorted(glob.glob(os.path.join(DEFAULT_TRACES, "*.jsonl")))
    start = time.perf_counter()
    per_source = {}
    for path in files:
        source = os.path.splitext(os.path.basename(path))[0]
        calls = tokens = over = 0
        with open(path, encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                trajectory = json.loads(line)
                messages = [to_langchain(m, lc) for m in trajectory["messages"]]
                count = memoized(base_count, lc) if args.memo else base_count
                for k, message in enumerate(messages):
                    if k == 0 or message.type != "ai":
                        continue
                    kept = trim_messages(
                        messages[:k],
                        strategy="last",
                        start_on="human",
                        include_system=True,
                        max_tokens=args.budget - REQUEST_PRIMING,
                        token_counter=count,
                    )
                    sent = REQUEST_PRIMING + sum(count(m) for m in kept)
                    calls += 1
                    tokens += sent
                    over += sent > args.budget
        per_source[source] = {"calls": calls, "input_tokens": tokens, "over_budget": over}
    elapsed = time.perf_counter() - start
    total = {
        key: sum(s[key] for s in per_source.values()) for key in ("calls", "input_tokens", "over_budget")
    }
    if args.json:
        print(json.dumps({
            "langchain_core": langchain_core.__version__,
            "tiktoken": tiktoken.__version__,
            "budget": args.budget,
            "memo": args.memo,
            "sources": per_source,
            "all": total,
            "seconds": round(elapsed, 3),
        }, indent=2))
        return
    print(f"langchain-core {langchain_core.__version__}, tiktoken {tiktoken.__version__}, o200k_base, "
          f"budget {args.budget}{', memo' if args.memo else ''}")
    print(f"{'source':<34} {'method':<7} {'calls':>6} {'input tok':>12} {'over':>5}")
    for source, s in [*per_source.items(), ("all", total)]:
        print(f"{source:<34} {'window':<7} {s['calls']:>6} {s['input_tokens']:>12} {s['over_budget']:>5}")
    print(f"replay took {elapsed:.2f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
