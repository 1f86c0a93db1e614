"""A small HTTP fault proxy for the real-server stage (Python stdlib only).

It sits between a leasebeat runner and the Cycles server, forwards every request and
records what it saw (the request's kind, reservation id, idempotency key, a hash of the
body, the server's status and its remaining_ttl_ms / expires_at_ms), so the stage can
compare the client's view, the wire and Redis. Faults apply to the FIRST request of the
k-th distinct extend key of each reservation (a same-key retry passes untouched):

  drop       forward, let the server apply it, then close the client's connection
             without an answer (a response lost after the server applied the extend);
  late=MS    forward, then hold the server's answer MS ms before sending it (an answer
             later than the client's budget: the client gives up, the server applied it);
  slow=MS    hold the request MS ms before forwarding it (a slow server);
  pause=MS   call ``on_pause(MS)`` first (the stage pauses Redis writes for MS ms:
             the server's Redis call times out and it answers 500), then forward.

Rules are set per scenario: ``proxy.set_rules({2: "drop", 4: "late=900"})``.
"""

import gzip
import hashlib
import http.client
import http.server
import json
import re
import socket
import threading
import time

HOP = {"connection", "upgrade", "http2-settings", "keep-alive", "transfer-encoding", "te", "host",
       "content-length", "proxy-connection"}
PATH = re.compile(r"^/v1/reservations(?:/([^/]+)/(extend|commit|release))?$")


class FaultProxy:
    def __init__(self, upstream_host: str, upstream_port: int, on_pause=None):
        self.upstream = (upstream_host, upstream_port)
        self.on_pause = on_pause
        self.rules: dict[int, str] = {}
        self.log: list[dict] = []
        self._keys: dict[str, list[str]] = {}  # reservation id -> distinct extend keys in order
        self._faulted: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args):
                pass

            def do_POST(self):
                proxy._handle(self)

            def do_GET(self):
                proxy._handle(self)

        class Server(http.server.ThreadingHTTPServer):
            # socketserver's default listen backlog is 5: ten runners connecting at once
            # (one connection per request) overflowed it, and a dropped SYN costs ~1 s.
            request_queue_size = 256

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def set_rules(self, rules: dict[int, str]) -> None:
        with self._lock:
            self.rules = dict(rules)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _fault_for(self, kind, rid, key):
        if kind != "extend" or rid is None or key is None:
            return None
        with self._lock:
            keys = self._keys.setdefault(rid, [])
            if key not in keys:
                keys.append(key)
            ordinal = keys.index(key) + 1
            rule = self.rules.get(ordinal)
            if rule is None or (rid, key) in self._faulted:
                return None
            self._faulted.add((rid, key))
            return rule

    def _handle(self, h):
        t_req = time.time() * 1000.0
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        path = h.path.split("?", 1)[0]
        m = PATH.match(path)
        kind = (m.group(2) or "create") if m and h.command == "POST" else "other"
        rid = m.group(1) if m else None
        key = None
        try:
            key = json.loads(body).get("idempotency_key") if body else None
        except (ValueError, AttributeError):
            pass
        fault = self._fault_for(kind, rid, key)
        if fault and fault.startswith("slow="):
            time.sleep(int(fault[5:]) / 1000.0)
        if fault and fault.startswith("pause=") and self.on_pause:
            self.on_pause(int(fault[6:]))
        headers = {k: v for k, v in h.headers.items() if k.lower() not in HOP}
        entry = {"t_req": t_req, "kind": kind, "rid": rid, "key": key,
                 "header_key": h.headers.get("X-Idempotency-Key"),
                 "body_sha": hashlib.sha256(body).hexdigest()[:16], "fault": fault}
        try:
            conn = http.client.HTTPConnection(*self.upstream, timeout=60)
            conn.request(h.command, h.path, body=body if h.command == "POST" else None, headers=headers)
            resp = conn.getresponse()
            status, rheaders, rbody = resp.status, resp.getheaders(), resp.read()
            conn.close()
        except OSError as e:
            entry.update(status=None, error=repr(e), t_resp=time.time() * 1000.0)
            self._record(entry)
            h.close_connection = True
            try:
                h.send_error(502)
            except OSError:
                pass
            return
        entry.update(status=status, t_resp=time.time() * 1000.0)
        try:
            plain = rbody
            if dict((k.lower(), v) for k, v in rheaders).get("content-encoding", "").lower() == "gzip":
                plain = gzip.decompress(rbody)  # the server gzips answers over 1 KiB when asked
            doc = json.loads(plain) if plain else None
        except (ValueError, OSError, EOFError):
            doc = None
        if isinstance(doc, dict):
            for f in ("remaining_ttl_ms", "expires_at_ms", "reservation_id", "error"):
                if f in doc:
                    entry[f] = doc[f]
            if kind == "create" and entry.get("reservation_id"):
                entry["rid"] = entry["reservation_id"]
        self._record(entry)
        if fault == "drop":
            h.close_connection = True
            try:
                h.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        if fault and fault.startswith("late="):
            time.sleep(int(fault[5:]) / 1000.0)
        try:
            h.send_response(status)
            for k, v in rheaders:
                if k.lower() not in HOP:
                    h.send_header(k, v)
            h.send_header("Content-Length", str(len(rbody)))
            h.send_header("Connection", "close")
            h.end_headers()
            h.wfile.write(rbody)
        except OSError:
            pass  # the client gave up (its budget passed)

    def _record(self, entry):
        with self._lock:
            self.log.append(entry)
