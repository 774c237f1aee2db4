#!/usr/bin/env python3
"""The figures of one real-client run, and the table of a whole invocation (tests/clients/run.sh).

  figures.py run DIR --mode direct|observe|fit [--budget N] [--loom LOOM] [--exit RC] [--passed 0|1]
      writes DIR/figures.json from what the run left in DIR: mock/ (what reached the provider),
      client/ (what the client sent and what Loom answered), loom.db (Loom's log and receipts)
      and check.json (check.py's findings)
  figures.py summary WORKDIR
      prints one line per run (every WORKDIR/*/figures.json) and, for every client and scenario
      run in both `observe` and `fit`, fit's upstream input tokens as a share of observe's

The figures (keys of figures.json):

  upstream_requests      model calls the mock received (POST to /v1/messages, /v1/responses,
                         /v1/chat/completions; not count_tokens, not GET /v1/models)
  input_tokens           the o200k_base tokens of those request bodies, summed: every byte the
                         upstream received (the JSON included), counted exactly
  largest_request        the largest of them (tokens), and largest_request_bytes
  tokenizer              how they were counted: `o200k_base` (exact: tiktoken with the o200k_base
                         file litellm ships in the aider/mini venvs, no download), or
                         `bytes/4 (estimate)` when that file or tiktoken is missing
  window, over_window    the model's context window (Loom's built-in registry, WINDOWS below)
                         and the requests whose body is larger than it by that count (a body count
                         is an upper bound of what the provider counts: JSON syntax is in it)
  sessions, forks        sessions in Loom's database (`loom sessions --json`); forks are ids
                         ending in `~N`
  loom_4xx, loom_409     replies of Loom to the client with a 4xx status, with 409; loom_errors
                         lists every non-2xx reply (status and the start of its body)
  orphans                tool calls without their result or results without their call in what
                         reached the mock (check.py's pairing findings)
  fallbacks              fit replies that came back with X-Loom-Mode: observe
  fit_check_failed       Loom's counter loom_upstream_errors_total{kind="fit_check_failed"} (its
                         /metrics, saved by run.sh as metrics.txt before Loom stops): fitted
                         bodies that failed Loom's own check and went unfitted; check_failed_log
                         the lines of loom.log saying so ("failed Loom's check")
  history_continued, history_whole
                         Loom's counter loom_proxy_histories_total: histories read only past
                         what Loom remembered of the session's previous body (the fast path), and
                         read whole; the table's `fast` is the first over all but the first
  receipts, loom_estimate_max, over_budget
                         fit receipts in the database, the largest of Loom's estimates, and the
                         receipts whose estimate is over the budget (`budget = N` in the config,
                         or the receipt's own hard_total when none was set); over_budget_by_body:
                         the requests whose body, counted as above, is over `budget = N`

Only the standard library (and, when it can be found, tiktoken from the clients' venvs).
"""

import argparse
import glob
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check import fmt_of, load_dir, pairing_problems  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

# Context windows of the models the clients send by default, as Loom's built-in registry has them
# runs without receipts: direct and observe). Longest prefix wins.
WINDOWS = {
    "claude-": 200000,
    "gpt-4.1": 1047576,
    "gpt-4o": 128000,
    "gpt-6": 400000,  # counted as its family's newest (gpt-5.1: 400000)
    "gpt-5": 400000,
}


def window_of(model):
    best = None
    for prefix, w in WINDOWS.items():
        if (model or "").startswith(prefix) and (best is None or len(prefix) > len(best[0])):
            best = (prefix, w)
    return best[1] if best else None


def tokenizer():
    """An exact o200k_base counter, offline: tiktoken and the vocabulary file litellm bundles."""
    clients_dir = os.environ.get("LOOM_CLIENTS_DIR") or os.path.join(HERE, "..", "..", "target", "clients")
    for venv in ("mini", "aider"):
        for site in glob.glob(os.path.join(clients_dir, "venv", venv, "lib", "python3*", "site-packages")):
            cache = os.path.join(site, "litellm", "litellm_core_utils", "tokenizers")
            if not os.path.isdir(os.path.join(site, "tiktoken")) or not os.path.isdir(cache):
                continue
            os.environ["TIKTOKEN_CACHE_DIR"] = cache
            sys.path.append(site)
            try:
                import tiktoken  # noqa: PLC0415

                enc = tiktoken.get_encoding("o200k_base")
            except Exception:  # noqa: BLE001  (a missing file, a failed import: try the next)
                sys.path.remove(site)
                continue
            return "o200k_base", lambda text: len(enc.encode(text, disallowed_special=()))
    return "bytes/4 (estimate)", lambda text: max(1, len(text.encode("utf-8")) // 4)


def model_requests(reqs):
    return [r for r in reqs if fmt_of(r["path"]) and r["method"] == "POST"
            and not r["path"].endswith("count_tokens")]


def loom_sessions(loom, db):
    if not loom or not os.path.exists(db):
        return None
    try:
        out = subprocess.run([loom, "sessions", "--db", db, "--json"], capture_output=True, text=True,
                             timeout=120, check=True).stdout
        return json.loads(out)
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        print(f"figures: loom sessions failed: {e}", file=sys.stderr)
        return None


def receipts(db):
    """(session id, call, receipt) of every fit receipt in the SQLite log."""
    if not os.path.exists(db):
        return []
    import sqlite3  # noqa: PLC0415

    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        rows = con.execute("SELECT s.id, m.id, m.receipt FROM model_calls m JOIN sessions s ON s.pk = m.session "
                           "ORDER BY m.created_ms, m.id").fetchall()
    finally:
        con.close()
    out = []
    for sid, call, text in rows:
        r = json.loads(text).get("receipt")
        if isinstance(r, dict) and "estimate" in r:
            out.append((sid, call, r))
    return out


def metric_sum(path, label):
    """The sum of the Prometheus samples whose labels include `label`; None without the file."""
    if not os.path.exists(path):
        return None
    total = 0
    with open(path, errors="replace") as fh:
        for line in fh:
            if not line.startswith("#") and label in line:
                try:
                    total += int(float(line.rsplit(None, 1)[-1]))
                except ValueError:
                    pass
    return total


def count_lines(path, needle):
    if not os.path.exists(path):
        return None
    with open(path, errors="replace") as fh:
        return sum(1 for line in fh if needle in line)


def run_figures(args):
    d = args.dir
    name, count = tokenizer()
    mock = model_requests(load_dir(os.path.join(d, "mock")))
    sizes = []
    models = []
    for r in mock:
        text = r["raw"].decode("utf-8", errors="replace")
        sizes.append((count(text), len(r["raw"])))
        models.append((r.get("body") or {}).get("model") if isinstance(r.get("body"), dict) else None)
    f = {"id": os.path.basename(os.path.normpath(d)), "mode": args.mode, "budget": args.budget,
         "exit": args.exit, "passed": bool(args.passed), "tokenizer": name,
         "upstream_requests": len(mock), "input_tokens": sum(t for t, _ in sizes),
         "largest_request": max((t for t, _ in sizes), default=0),
         "largest_request_bytes": max((b for _, b in sizes), default=0)}

    recs = receipts(os.path.join(d, "loom.db")) if args.mode != "direct" else []
    # Not the receipts' context_window: with `budget = N` it is N plus the reply's reserve.
    over_window = []
    for (t, _), r, model in zip(sizes, mock, models):
        w = window_of(model)
        if w and t > w:
            over_window.append({"mock_request": r["seq"], "model": model, "tokens": t, "window": w})
    f["window"] = sorted({window_of(m) for m in models if m} - {None})
    f["over_window"] = len(over_window)
    f["over_window_requests"] = over_window[:10]

    f["orphans"] = sum(len(pairing_problems(fmt_of(r["path"]), r["body"])) for r in mock)

    if args.mode != "direct":
        client = load_dir(os.path.join(d, "client"))
        errors, fallbacks = [], 0
        for c in client:
            rep = c.get("reply") or {}
            st = rep.get("status")
            if st is None or not (200 <= st < 300):
                body = (rep.get("body") or "").strip().replace("\n", " ")
                errors.append({"client_request": c["seq"], "path": c["path"], "status": st, "body": body[:400]})
            h = {k.lower(): v for k, v in rep.get("headers") or []}
            if args.mode == "fit" and fmt_of(c["path"]) and h.get("x-loom-mode") == "observe":
                fallbacks += 1
        f["loom_errors"] = errors
        f["loom_4xx"] = sum(1 for e in errors if e["status"] and 400 <= e["status"] < 500)
        f["loom_409"] = sum(1 for e in errors if e["status"] == 409)
        f["fallbacks"] = fallbacks
        sess = loom_sessions(args.loom, os.path.join(d, "loom.db"))
        if sess is not None:
            f["sessions"] = len(sess)
            f["forks"] = sum(1 for s in sess if re.search(r"~\d+$", s["id"]))
            f["session_ids"] = [s["id"] for s in sess][:20]
        f["fit_check_failed"] = metric_sum(os.path.join(d, "metrics.txt"), 'kind="fit_check_failed"')
        # Histories Loom read only past what it remembered of the previous body (the fast path)
        # and histories it read whole.
        f["history_continued"] = metric_sum(os.path.join(d, "metrics.txt"), 'loom_proxy_histories_total{read="continuation"}')
        f["history_whole"] = metric_sum(os.path.join(d, "metrics.txt"), 'loom_proxy_histories_total{read="whole"}')
        f["check_failed_log"] = count_lines(os.path.join(d, "loom.log"), "failed Loom's check")
        f["receipts"] = len(recs)
        f["loom_estimate_max"] = max((r["estimate"] for _, _, r in recs), default=None)
        over = []
        for sid, call, r in recs:
            limit = args.budget or (r.get("budget") or {}).get("hard_total")
            if limit and r["estimate"] > limit:
                over.append({"session": sid, "call": call, "estimate": r["estimate"], "limit": limit})
        f["over_budget"] = len(over)
        f["over_budget_calls"] = over[:10]
        # The same limit against the exact count of the bodies (JSON syntax included, so an upper
        # bound of what the provider counts): not a failure, a measure of Loom's estimate.
        f["over_budget_by_body"] = sum(1 for t, _ in sizes if args.budget and t > args.budget)
    with open(os.path.join(d, "figures.json"), "w") as out:
        json.dump(f, out, indent=1)


def fast_share(f):
    """The share of histories read on the fast path, of those after the first."""
    cont, whole = f.get("history_continued"), f.get("history_whole")
    if cont is None or whole is None or cont + whole <= 1:
        return None
    return f"{100 * cont // (cont + whole - 1)}%"


def summary(args):
    rows = []
    for p in sorted(glob.glob(os.path.join(args.workdir, "*", "figures.json"))):
        with open(p) as fh:
            rows.append(json.load(fh))
    if not rows:
        return
    cols = [("run", 24), ("ok", 4), ("budget", 7), ("reqs", 5), ("input tok", 10), ("largest", 8),
            ("loom est", 8), ("sess", 5), ("forks", 5), ("4xx", 4), ("409", 4), ("orph", 5), (">budg", 6),
            (">b body", 7), (">win", 5), ("fallb", 5), ("chkfail", 7), ("fast", 6)]
    print(" ".join(c.ljust(w) for c, w in cols))

    def cell(v):
        return "-" if v is None else str(v)

    for f in rows:
        vals = [f["id"], "yes" if f.get("passed") else "NO", f.get("budget"), f["upstream_requests"],
                f["input_tokens"], f["largest_request"], f.get("loom_estimate_max"), f.get("sessions"), f.get("forks"),
                f.get("loom_4xx"), f.get("loom_409"), f.get("orphans"), f.get("over_budget"),
                f.get("over_budget_by_body"), f.get("over_window"), f.get("fallbacks"), f.get("fit_check_failed"),
                fast_share(f)]
        print(" ".join(cell(v).ljust(w) for v, (_, w) in zip(vals, cols)))
    by = {(f["id"].rsplit("-", 2)[0], f["mode"], f["id"].rsplit("-", 1)[1]): f for f in rows}
    lines = []
    for (client, mode, scenario), f in sorted(by.items()):
        if mode != "fit":
            continue
        o = by.get((client, "observe", scenario))
        if not o or not o["input_tokens"]:
            continue
        share = f["input_tokens"] / o["input_tokens"]
        lines.append(f"{client}-{scenario}: fit {f['input_tokens']} / observe {o['input_tokens']} input tokens "
                     f"= {share:.0%} (budget {cell(f.get('budget'))}; observe's largest request "
                     f"{o['largest_request']}, fit's {f['largest_request']})")
    if lines:
        print("fit vs observe, upstream input tokens:")
        for line in lines:
            print("  " + line)
    print(f"tokens counted with {rows[0]['tokenizer']} over the request bodies as sent")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("dir")
    r.add_argument("--mode", required=True, choices=("direct", "observe", "fit"))
    r.add_argument("--budget", type=int)
    r.add_argument("--loom")
    r.add_argument("--exit", type=int)
    r.add_argument("--passed", type=int, default=0)
    s = sub.add_parser("summary")
    s.add_argument("workdir")
    args = ap.parse_args()
    if args.cmd == "run":
        run_figures(args)
    else:
        summary(args)


if __name__ == "__main__":
    main()
