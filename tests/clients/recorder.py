#!/usr/bin/env python3
"""A pass-through recorder placed in front of `loom serve` (tests/clients/run.sh).

Forwards every request as it came (method, path with query, headers, body bytes) to --upstream
and streams the reply back unchanged, recording the request as the client sent it in
--record DIR/NNNN.json (the same shape as mock_upstream.py's records) and the reply's status,
headers and, for an error or a small reply, its body in NNNN.reply.json. check.py compares what
the client sent (here) with what the mock upstream received through Loom.

Usage: recorder.py --listen 127.0.0.1:0 --upstream http://127.0.0.1:PORT --record DIR
Prints `listening on http://ADDR` when ready. Standard library only.
"""

import argparse
import base64
import http.client
import http.server
import json
import os
import sys
import threading
import time
import urllib.parse

HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade",
       "host", "content-length"}
KEEP_REPLY_BODY = 64 * 1024


class Recorder(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    upstream = None
    record = None
    lock = threading.Lock()
    seq = 0

    def log_message(self, fmt, *args):
        sys.stderr.write("recorder: " + (fmt % args) + "\n")

    def read_body(self):
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            data = b""
            while True:
                n = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if n == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return data
                data += self.rfile.read(n)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def next_seq(self):
        with Recorder.lock:
            Recorder.seq += 1
            return Recorder.seq

    def forward(self):
        raw = self.read_body()
        seq = self.next_seq()
        url = urllib.parse.urlsplit(self.path)
        rec = {"seq": seq, "time": time.time(), "method": self.command, "path": url.path, "query": url.query,
               "headers": [[k, v] for k, v in self.headers.items()]}
        try:
            rec["body_raw"] = raw.decode("utf-8")
        except UnicodeDecodeError:
            rec["body_base64"] = base64.b64encode(raw).decode()
        with open(os.path.join(self.record, f"{seq:04d}.json"), "w") as f:
            json.dump(rec, f, ensure_ascii=False)

        up = urllib.parse.urlsplit(self.upstream)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        headers["Host"] = up.netloc
        if raw or self.command in ("POST", "PUT", "PATCH"):
            headers["Content-Length"] = str(len(raw))
        reply = {"seq": seq, "status": None, "headers": [], "body": None}
        conn = http.client.HTTPConnection(up.hostname, up.port, timeout=900)
        try:
            conn.request(self.command, self.path, body=raw if raw else None, headers=headers)
            resp = conn.getresponse()
        except Exception as e:  # noqa: broad, reported to the client as a 502
            reply["status"] = 502
            reply["body"] = f"recorder: upstream unreachable: {e}"
            data = reply["body"].encode()
            self.send_response(502)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self.save_reply(seq, reply)
            return
        reply["status"] = resp.status
        reply["headers"] = [[k, v] for k, v in resp.getheaders()]
        self.send_response_only(resp.status, resp.reason)
        length = None
        for k, v in resp.getheaders():
            if k.lower() in HOP:
                continue
            self.send_header(k, v)
        length = resp.getheader("Content-Length")
        chunked = length is None
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", length)
        self.end_headers()
        kept = bytearray()
        try:
            while True:
                block = resp.read1(65536) if hasattr(resp, "read1") else resp.read(65536)
                if not block:
                    break
                if len(kept) < KEEP_REPLY_BODY:
                    kept.extend(block[:KEEP_REPLY_BODY - len(kept)])
                if chunked:
                    self.wfile.write(f"{len(block):x}\r\n".encode() + block + b"\r\n")
                else:
                    self.wfile.write(block)
                self.wfile.flush()
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError) as e:
            reply["client_gone"] = str(e)
        finally:
            conn.close()
        reply["body"] = kept.decode("utf-8", "replace")
        self.save_reply(seq, reply)

    def save_reply(self, seq, reply):
        with open(os.path.join(self.record, f"{seq:04d}.reply.json"), "w") as f:
            json.dump(reply, f, ensure_ascii=False)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = forward


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", default="127.0.0.1:0")
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--record", required=True)
    args = ap.parse_args()
    os.makedirs(args.record, exist_ok=True)
    Recorder.upstream = args.upstream.rstrip("/")
    Recorder.record = args.record
    host, _, port = args.listen.rpartition(":")
    server = http.server.ThreadingHTTPServer((host or "127.0.0.1", int(port)), Recorder)
    server.daemon_threads = True
    print(f"listening on http://{server.server_address[0]}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
