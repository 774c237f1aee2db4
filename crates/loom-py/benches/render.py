"""A render through Python, for the overhead target (issue 16: at most 1.2x the same render from
Rust, plus 20 us): the same loop as `cargo bench -p loom-server --bench render_loop`, through
the bindings. Also times a call that does nothing in Rust (`session_info` of a missing session)
for the binding's own cost.

    python crates/loom-py/benches/render.py [TURNS] [--memory]

``--memory`` renders from an in-memory store (``loom.open(":memory:")``), where no durable
commit hides what the crossing costs.
"""

import os
import statistics
import sys
import tempfile
import time

import loom


def text(kind: str, i: int) -> str:
    return f"{kind} turn {i}: " + "the parser rejects a unary minus after a parenthesis " * 4


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("-")]
    turns = int(args[0]) if args else 400
    memory = "--memory" in sys.argv
    db = loom.open(":memory:" if memory else os.path.join(tempfile.mkdtemp(), "render.db"))
    s = db.create_session("bench")
    times = []
    for i in range(turns):
        s.append([{"kind": "user", "content": text("user", i), "ts_ms": i},
                  {"kind": "assistant", "content": text("assistant", i), "ts_ms": i}])
        started = time.perf_counter()
        s.render(model="gpt-4o", budget=16_000)
        times.append(time.perf_counter() - started)
    measured = times[turns // 2:]
    print(f"python render{' (in memory)' if memory else ''}: {turns} turns, the last {len(measured)} measured: "
          f"mean {statistics.mean(measured) * 1e6:.1f} us, p50 {statistics.median(measured) * 1e6:.1f} us")
    native = db._native
    calls = []
    for _ in range(2000):
        started = time.perf_counter()
        native.session_info("missing")
        calls.append(time.perf_counter() - started)
    print(f"python call into the bindings (a missing session's info): p50 {statistics.median(calls) * 1e6:.1f} us")


if __name__ == "__main__":
    main()
