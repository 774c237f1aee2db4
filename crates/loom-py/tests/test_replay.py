"""A replay in Python: every call of every trajectory (the sample in examples/, and
../shared/traces when it is there) rendered through the bindings at 16k gives the same request
bodies as `loom replay --emit-requests`, byte for byte."""

from __future__ import annotations

import json
import pathlib
import subprocess

import pytest

import loom

from conftest import ROOT, loom_binary

SHARED = ROOT.parent / "shared" / "traces"
TRACES = [ROOT / "examples" / "sample-trajectories.jsonl"] + (
    sorted(SHARED.glob("*.jsonl")) if SHARED.is_dir() else []
)
BUDGET = 16_000


def emitted(trace: pathlib.Path, tmp: pathlib.Path) -> dict:
    """`loom replay`'s requests for every call of `trace`: {(trace id, call): request text}."""
    out = tmp / "requests.jsonl"
    subprocess.run(
        [str(loom_binary()), "--db", str(tmp / "replay.db"), "replay", str(trace),
         "--budget", str(BUDGET), "--emit-requests", str(out)],
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=1800,
    )
    requests = {}
    for line in out.read_text().splitlines():
        record = json.loads(line)
        # The request's bytes as Loom writes them: compact, keys in order.
        requests[(record["trace_id"], record["call"])] = json.dumps(
            record["request"], separators=(",", ":"), ensure_ascii=False, sort_keys=True
        )
    return requests


@pytest.mark.parametrize("trace", TRACES, ids=[t.stem for t in TRACES])
def test_python_replay_gives_loom_replays_requests(trace, tmp_path):
    want = emitted(trace, tmp_path)
    assert want, f"{trace}: loom replay emitted no request"
    db = loom.open(str(tmp_path / "python.db"))
    seen = 0
    with trace.open() as lines:
        for index, line in enumerate(lines):
            if not line.strip():
                continue
            trajectory = json.loads(line)
            messages, tid = trajectory["messages"], trajectory["id"]
            session = f"trajectory-{index}"
            for k, message in enumerate(messages):
                if k == 0 or message["role"] != "assistant":
                    continue
                # The conversation up to the call, as a client would send it: the log takes
                # what is new.
                db.import_history(messages[:k], format="openai", session=session)
                rendered = db.session(session).render(model="gpt-4o", budget=BUDGET)
                expected = want.pop((tid, k), None)
                assert expected is not None, f"{tid} call {k}: loom replay emitted no request"
                assert rendered.text == expected, f"{tid} call {k}: the requests differ"
                seen += 1
    assert not want, f"calls loom replay made that Python did not: {sorted(want)[:5]}"
    assert seen > 0
