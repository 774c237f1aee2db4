"""Every call of every trajectory in ../shared/traces, rendered at 16k through the Python
bindings (the loop of tests/test_replay.py, which checks the bodies against `loom replay`),
timed: the figure to set against `scripts/langchain_replay.py` (LangChain's `trim_messages`).

    python crates/loom-py/benches/replay.py [--db PATH] [FILES...]

The database is in memory by default (``loom.open(":memory:")``), as `loom replay` keeps its
own; ``--db PATH`` replays into an SQLite file instead (every render's receipt committed).
"""

import json
import os
import pathlib
import sys
import time

import loom

ROOT = pathlib.Path(__file__).resolve().parents[3]


def main() -> None:
    args = sys.argv[1:]
    where = ":memory:"
    if args[:1] == ["--db"]:
        where, args = args[1], args[2:]
    files = [pathlib.Path(f) for f in args] or sorted((ROOT.parent / "shared" / "traces").glob("*.jsonl"))
    db = loom.open(where)
    calls = 0
    started, cpu = time.perf_counter(), time.process_time()
    for path in files:
        with path.open() as lines:
            for index, line in enumerate(lines):
                if not line.strip():
                    continue
                messages = json.loads(line)["messages"]
                session = f"{path.stem}-{index}"
                for k, message in enumerate(messages):
                    if k == 0 or message["role"] != "assistant":
                        continue
                    db.import_history(messages[:k], format="openai", session=session)
                    db.session(session).render(model="gpt-4o", budget=16_000)
                    calls += 1
    took, cpu = time.perf_counter() - started, time.process_time() - cpu
    print(f"python replay into {where}: {len(files)} files, {calls} calls at 16k in {took:.2f} s, {cpu:.2f} s of CPU ({took / max(calls, 1) * 1e3:.2f} ms a call)")


if __name__ == "__main__":
    main()
