#!/usr/bin/env python3
"""A stand-in OpenAI upstream for the inspector's browser test (standard library only): answers
every POST .../chat/completions with one short assistant reply and its usage, and writes the
request body it received, byte for byte, to OUT_DIR/received-N.json (N counting from 1).

    upstream.py PORT_FILE OUT_DIR

Listens on an ephemeral loopback port and writes it to PORT_FILE once listening.
"""
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    count = 0

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        Handler.count += 1
        with open(os.path.join(sys.argv[2], f"received-{Handler.count}.json"), "wb") as f:
            f.write(body)
        model = json.loads(body).get("model", "gpt-4o")
        reply = json.dumps({
            "id": f"chatcmpl-{Handler.count}", "object": "chat.completion", "created": 0,
            "model": model,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "The build passes now."}}],
            "usage": {"prompt_tokens": 900, "completion_tokens": 6, "total_tokens": 906},
        }).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    server.serve_forever()
