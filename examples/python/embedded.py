"""The engine in-process: import a history, render it within a budget, read the receipt, get
back what the render left out, count tokens. No server, no network.

    python examples/python/embedded.py
"""

import loom

LISTING = "\n".join(f"src/module_{n}.py: def handler_{n}(request): ..." for n in range(600))

db = loom.open(":memory:")  # or "loom.db", or "postgres://user@host:5432/db"
history = [
    {"role": "system", "content": "You fix bugs in this repository."},
    {"role": "user", "content": "The handler for /orders returns 500; find out why."},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "grep -rn def src"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": LISTING},
    {"role": "assistant", "content": "handler_412 looks like the /orders handler; reading it next."},
]
session = db.import_history(history, format="openai", session="orders-bug")
rendered = session.render(model="gpt-4o", budget=2_000)

print("full history:", loom.count_request({"messages": history}, "gpt-4o"), "tokens")
print("Loom's request:", loom.count_request(rendered.body, "gpt-4o"), "tokens (budget 2,000)")
print("stubbed seqs:", rendered.receipt["stubbed"])
# What was cut is recoverable: the receipt's stubs name a reference; recall returns the bytes.
step = [e for e in session.events() if e["kind"] == "tool_result"][0]
explained = session.explain(step["seq"])
print("the listing's original:", explained["original"])
original = db.recall(explained["original"]["ref"], session="orders-bug")
print("recalled", len(original), "bytes; same as sent:", original.decode() == LISTING)
print("tokens of one line:", loom.count_tokens("def handler_412(request):", model="gpt-4o"))
