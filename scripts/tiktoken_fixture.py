#!/usr/bin/env python3
"""Expected token counts from Python tiktoken, and Python tiktoken's throughput, offline.

Two commands:

  fixture  Writes crates/loom-tokens/tests/fixtures/tiktoken_counts.json: for every trajectory of
           every file in ../shared/traces, the o200k_base and cl100k_base counts of each text
           piece (see `pieces`), as tiktoken's `encode_ordinary` gives them. The Rust test
           `exact_counts_match_python_tiktoken` compares loom-tokens against it.
  bench    Times tiktoken single-threaded on the same pieces the Rust bench counts and prints
           one JSON line per encoding (MB/s). scripts/bench_tokens.sh runs it together with the
           criterion bench, so both figures come from one run on one machine.

tiktoken downloads its vocabularies on first use; that is impossible here, so this script writes
them into a private cache folder first (TIKTOKEN_CACHE_DIR, each file named by the SHA-1 of its
download URL, which is how tiktoken looks them up). The files come from the vocabularies the Rust
crate embeds (bpe-openai ships them gzipped in its `data/` folder, found in cargo's registry after
`cargo fetch`); tiktoken itself then checks their SHA-256 against the hashes it knows, so a wrong
vocabulary cannot go unnoticed.

Setup (once):  python3 -m venv .venv && .venv/bin/pip install tiktoken && cargo fetch
Run:           .venv/bin/python scripts/tiktoken_fixture.py fixture
"""

import argparse
import glob
import gzip
import hashlib
import json
import os
import sys
import tempfile
import time

ENCODINGS = ("o200k_base", "cl100k_base")
URL = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_TRACES = os.path.join(ROOT, "..", "shared", "traces")
DEFAULT_OUT = os.path.join(ROOT, "crates", "loom-tokens", "tests", "fixtures", "tiktoken_counts.json")


def find_vocab_dir():
    """bpe-openai's data folder in cargo's registry (newest version first)."""
    cargo_home = os.environ.get("CARGO_HOME", os.path.expanduser("~/.cargo"))
    found = sorted(glob.glob(os.path.join(cargo_home, "registry", "src", "*", "bpe-openai-*", "data")))
    if not found:
        sys.exit("bpe-openai's vocabularies not found in cargo's registry: run `cargo fetch` first")
    return found[-1]


def prepare_cache(vocab_dir):
    """Writes the vocabularies where tiktoken looks for them and points TIKTOKEN_CACHE_DIR there."""
    cache = tempfile.mkdtemp(prefix="tiktoken-cache-")
    for name in ENCODINGS:
        with gzip.open(os.path.join(vocab_dir, name + ".tiktoken.gz"), "rb") as f:
            data = f.read()
        key = hashlib.sha1(URL.format(name).encode()).hexdigest()
        with open(os.path.join(cache, key), "wb") as f:
            f.write(data)
    os.environ["TIKTOKEN_CACHE_DIR"] = cache


def pieces(message):
    """The text pieces of one OpenAI Chat message, in the order the Rust test rebuilds them:
    the content (a string, or each text part of a list), the name, then each tool call's
    function name and arguments."""
    out = []
    content = message.get("content")
    if isinstance(content, str):
        out.append(content)
    elif isinstance(content, list):
        out.extend(p["text"] for p in content if p.get("type") == "text")
    if isinstance(message.get("name"), str):
        out.append(message["name"])
    for call in message.get("tool_calls") or []:
        out.append(call["function"]["name"])
        out.append(call["function"]["arguments"])
    return out


def trajectories(traces):
    for path in sorted(glob.glob(os.path.join(traces, "*.jsonl"))):
        with open(path, "rb") as f:
            raw = f.read()
        rows = [json.loads(line) for line in raw.decode("utf-8").splitlines() if line.strip()]
        yield os.path.basename(path), hashlib.sha256(raw).hexdigest(), rows


def all_pieces(traces):
    return [p for _, _, rows in trajectories(traces) for t in rows for m in t["messages"] for p in pieces(m)]


def cmd_fixture(args, tiktoken):
    encs = {name: tiktoken.get_encoding(name) for name in ENCODINGS}
    files = {}
    totals = {name: 0 for name in ENCODINGS}
    for name, sha, rows in trajectories(args.traces):
        out = []
        for t in rows:
            texts = [p for m in t["messages"] for p in pieces(m)]
            entry = {"id": t["id"]}
            for enc_name, enc in encs.items():
                counts = [len(enc.encode_ordinary(s)) for s in texts]
                totals[enc_name] += sum(counts)
                entry[enc_name] = counts
            out.append(entry)
        files[name] = {"sha256": sha, "trajectories": out}
    doc = {
        "generator": "scripts/tiktoken_fixture.py fixture",
        "tiktoken": tiktoken.__version__,
        "totals": totals,
        "files": files,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        # One trajectory per line keeps the file diffable and small.
        f.write("{\n")
        f.write(f'"generator": {json.dumps(doc["generator"])},\n')
        f.write(f'"tiktoken": {json.dumps(doc["tiktoken"])},\n')
        f.write(f'"totals": {json.dumps(totals)},\n')
        f.write('"files": {\n')
        for i, (name, body) in enumerate(files.items()):
            f.write(f'{json.dumps(name)}: {{"sha256": {json.dumps(body["sha256"])}, "trajectories": [\n')
            lines = [json.dumps(e, separators=(",", ":")) for e in body["trajectories"]]
            f.write(",\n".join(lines))
            f.write("\n]}" + ("," if i + 1 < len(files) else "") + "\n")
        f.write("}}\n")
    print(f"wrote {args.out}: totals {totals}", file=sys.stderr)


def cmd_bench(args, tiktoken):
    texts = all_pieces(args.traces)
    total_bytes = sum(len(s.encode("utf-8")) for s in texts)
    for name in ENCODINGS:
        enc = tiktoken.get_encoding(name)
        enc.encode_ordinary("warm up")
        best = cpu_best = None
        tokens = 0
        for _ in range(args.repeat):
            start, cpu_start = time.perf_counter(), time.thread_time()
            tokens = sum(len(enc.encode_ordinary(s)) for s in texts)
            elapsed, cpu = time.perf_counter() - start, time.thread_time() - cpu_start
            best = elapsed if best is None else min(best, elapsed)
            cpu_best = cpu if cpu_best is None else min(cpu_best, cpu)
        # Wall time suffers when other processes share the cores; the thread's CPU time does
        # not, so both are printed (examples/throughput.rs prints the same pair for Rust).
        print(json.dumps({
            "impl": "python-tiktoken " + tiktoken.__version__,
            "encoding": name,
            "pieces": len(texts),
            "bytes": total_bytes,
            "tokens": tokens,
            "wall_mb_per_s": round(total_bytes / best / 1e6, 2),
            "cpu_mb_per_s": round(total_bytes / cpu_best / 1e6, 2),
        }))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["fixture", "bench"])
    parser.add_argument("--traces", default=DEFAULT_TRACES)
    parser.add_argument("--out", default=DEFAULT_OUT)
    parser.add_argument("--vocab-dir", default=None, help="folder with <encoding>.tiktoken.gz files")
    parser.add_argument("--repeat", type=int, default=5, help="bench: timed passes (best is kept)")
    args = parser.parse_args()
    prepare_cache(args.vocab_dir or find_vocab_dir())
    import tiktoken  # after TIKTOKEN_CACHE_DIR is set

    if args.command == "fixture":
        cmd_fixture(args, tiktoken)
    else:
        cmd_bench(args, tiktoken)


if __name__ == "__main__":
    main()
