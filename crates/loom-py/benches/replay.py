"""Every call of every trajectory in ../shared/traces, rendered at 16k through the Python
bindings (the loop of tests/test_replay.py, which checks the bodies against `loom replay`),
timed: the figure to set against `scripts/langchain_replay.py` (LangChain's `trim_messages`).

    python crates/loom-py/benches/replay.py [FILES...]
"""

import json
import os
import pathlib
import sys
import tempfile
import time

import loom

ROOT = pathlib.Path(__file__).resolve().parents[3]


def main() -> None:
    files = [pathlib.Path(f) for f in sys.argv[1:]] or sorted((ROOT.parent / "shared" / "traces").glob("*.jsonl"))
    db = loom.open(os.path.join(tempfile.mkdtemp(), "replay.db"))
    calls = 0
    started = time.perf_counter()
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
    took = time.perf_counter() - started
    print(f"python replay: {len(files)} files, {calls} calls at 16k in {took:.2f} s ({took / max(calls, 1) * 1e3:.2f} ms a call)")


if __name__ == "__main__":
    main()
