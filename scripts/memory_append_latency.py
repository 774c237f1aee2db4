"""Latency of the paths that index memory on append, with memory on and off (`loom serve
--no-memory`): proxied chat calls whose history grows by a turn each (the proxy's hot path),
and API appends. Indexing runs on its own thread, so the figures should match.

    python3 scripts/memory_append_latency.py [--loom target/release/loom]
        [--mock target/release/loom-mock-upstream] [--calls 300]

Prints one line per configuration: median and p99 of each path, in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
import urllib.request


def start(cmd):
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    if not line.startswith("listening on "):
        proc.kill()
        raise SystemExit(f"{cmd[0]} did not start: {line!r}")
    return proc, line.split()[-1]


def post(url, body, headers=None):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    req.add_header("content-type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    started = time.perf_counter()
    with urllib.request.urlopen(req, timeout=60) as r:
        r.read()
    return (time.perf_counter() - started) * 1000


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def run(loom, mock_url, calls, memory):
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [loom, "serve", "--db", f"{tmp}/l.db", "--listen", "127.0.0.1:0",
               "--upstream-openai", f"{mock_url}/v1", "--upstream-anthropic", mock_url]
        if not memory:
            cmd.append("--no-memory")
        proc, url = start(cmd)
        try:
            messages, proxy = [], []
            for i in range(calls):
                messages.append({"role": "user", "content": f"turn {i}: please note that the "
                                 f"build server number {i} runs release {i * 7} on port {8000 + i}"})
                proxy.append(post(f"{url}/v1/chat/completions",
                                  {"model": "gpt-4o", "messages": messages},
                                  {"x-loom-session": "conv", "authorization": "Bearer sk-test"}))
                messages.append({"role": "assistant", "content": f"Noted item {i}."})
            post(f"{url}/loom/v1/sessions", {"id": "api", "agent": "a"})
            api = [post(f"{url}/loom/v1/sessions/api/events",
                        {"events": [{"ts_ms": int(time.time() * 1000), "kind": "user",
                                     "content": f"fact {i}: the cache of shard {i} holds {i * 3} keys"}]})
                   for i in range(calls)]
        finally:
            proc.terminate()
            proc.wait()
    return proxy, api


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--loom", default="target/release/loom")
    ap.add_argument("--mock", default="target/release/loom-mock-upstream")
    ap.add_argument("--calls", type=int, default=300)
    a = ap.parse_args()
    mock, mock_url = start([a.mock, "--listen", "127.0.0.1:0"])
    try:
        for memory in (False, True, False, True):
            proxy, api = run(a.loom, mock_url, a.calls, memory)
            print(f"memory {'on ' if memory else 'off'}: proxy p50 {statistics.median(proxy):.2f} "
                  f"p99 {pct(proxy, 99):.2f} ms · append p50 {statistics.median(api):.2f} "
                  f"p99 {pct(api, 99):.2f} ms ({a.calls} calls each)", flush=True)
    finally:
        mock.terminate()
        mock.wait()


if __name__ == "__main__":
    main()
