"""The bundled transports read at most MAX_BODY_BYTES of a response body and
stop reading at the attempt's deadline (issue 25, defect 5), against a small
127.0.0.1 server of this file that sends a 100 MB body, an endless chunked
body, or a body that trickles forever. Asserted: the outcome (a response with
an empty body, as the Rust driver returns for an over-cap body, or a timeout),
the bytes the server managed to hand to the kernel, the peak of Python's
traced memory, and that the attempt's connection is closed when it ends. No
assertion on wall time."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import httpx
import pytest

import leasebeat
from leasebeat.transports import (
    MAX_BODY_BYTES,
    AsyncHttpxTransport,
    AsyncUrllibTransport,
    HttpxTransport,
    UrllibTransport,
)

MB = 1_000_000
#: The most any case sends (the old, unbounded transports read all of it).
SEND_LIMIT = 200 * MB
#: Loopback socket buffers can hold a few MB the client never read.
SLACK = 32 * MB
WAIT_S = 30.0


class BodyServer:
    """Answers every request on 127.0.0.1 with a 200 whose body `mode` makes:
    "big" (Content-Length 100 MB, sent in full unless the client closes),
    "chunked" (chunked, endless), "trickle" (chunked, 10 bytes per 50 ms,
    endless), "exact" (exactly MAX_BODY_BYTES). Records what each connection
    sent and whether it ended because the client closed it."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.sent: list[int] = []
        self.closed_by_client: list[bool] = []
        self.done = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        sent = 0
        closed = False
        try:
            conn.settimeout(WAIT_S)
            head = b""
            while b"\r\n\r\n" not in head:
                data = conn.recv(65536)
                if not data:
                    return
                head += data
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            rest = head.split(b"\r\n\r\n", 1)[1]
            while len(rest) < length:
                data = conn.recv(65536)
                if not data:
                    return
                rest += data
            block = b"x" * 65536
            if self.mode == "big":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n")
                while sent < 100 * MB:
                    sent += conn.send(block[: min(len(block), 100 * MB - sent)])
            elif self.mode == "exact":
                body = b'{"a":"' + b"y" * (MAX_BODY_BYTES - 8) + b'"}'
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
                sent = len(body)
            else:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
                small = self.mode == "trickle"
                piece = b"a\r\n0123456789\r\n" if small else b"10000\r\n" + block + b"\r\n"
                while sent < SEND_LIMIT:
                    conn.sendall(piece)
                    sent += 10 if small else len(block)
                    if small:
                        time.sleep(0.05)
            # Wait for the client to close (an EOF) rather than closing first.
            conn.settimeout(WAIT_S)
            closed = conn.recv(1) == b""
        except OSError:
            closed = True  # reset or broken pipe: the client closed it
        finally:
            self.sent.append(sent)
            self.closed_by_client.append(closed)
            conn.close()
            self.listener.close()
            self.done.set()


REQ = leasebeat.Request("extend", "/v1/reservations/r-1/extend", "k-1", b'{"idempotency_key":"k-1","extend_by_ms":60000}', None, None)


# Each maker builds its transport (and client) first, then returns a call
# taking the deadline: building an httpx client (its SSL context) can take
# longer than a short deadline, which must bound the attempt alone.
def _urllib(url: str) -> Callable[[int | None], Any]:
    t = UrllibTransport(url, "key")
    return lambda deadline: t(REQ, deadline)


def _httpx(url: str) -> Callable[[int | None], Any]:
    def call(deadline: int | None) -> Any:
        try:
            return t(REQ, deadline)
        finally:
            client.close()

    client = httpx.Client()
    t = HttpxTransport(client, url, "key")
    return call


def _async_urllib(url: str) -> Callable[[int | None], Any]:
    t = AsyncUrllibTransport(url, "key")
    return lambda deadline: asyncio.run(t(REQ, deadline))


def _async_httpx(url: str) -> Callable[[int | None], Any]:
    def call(deadline: int | None) -> Any:
        async def go() -> Any:
            try:
                return await t(REQ, deadline)
            finally:
                await client.aclose()

        return asyncio.run(go())

    client = httpx.AsyncClient()  # bound to the loop of its first request
    t = AsyncHttpxTransport(client, url, "key")
    return call


TRANSPORTS = {"urllib": _urllib, "httpx": _httpx, "async_urllib": _async_urllib, "async_httpx": _async_httpx}


def _call(make: Callable[[str], Callable[[int | None], Any]], server: BodyServer, budget_ns: int | None) -> tuple[Any, int]:
    """Runs one attempt with a deadline ``budget_ns`` from now (None:
    none); returns its outcome (a response or the raised exception) and the
    peak of traced memory during it."""
    call = make(server.url)
    tracemalloc.start()
    try:
        try:
            out: Any = call(None if budget_ns is None else time.monotonic_ns() + budget_ns)
        except leasebeat.TransportError as e:
            out = e
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert server.done.wait(WAIT_S), "the server's connection never ended"
    return out, peak


@pytest.mark.parametrize("name", TRANSPORTS)
@pytest.mark.parametrize("mode", ["big", "chunked"])
@pytest.mark.parametrize("bounded", [True, False], ids=["deadline", "no-deadline"])
def test_an_over_cap_body_is_not_read(name: str, mode: str, bounded: bool) -> None:
    server = BodyServer(mode)
    out, peak = _call(TRANSPORTS[name], server, 60_000_000_000 if bounded else None)
    # As the Rust driver: the status and headers, an empty body (the core
    # then classifies a 200 without a usable body as ambiguous).
    assert isinstance(out, leasebeat.HttpResponse), out
    assert out.status == 200 and out.body == b""
    assert server.closed_by_client == [True]
    assert server.sent[0] < MAX_BODY_BYTES + SLACK, server.sent
    assert peak < 16 * 1024 * 1024, peak


@pytest.mark.parametrize("name", TRANSPORTS)
def test_a_body_of_exactly_the_cap_is_read(name: str) -> None:
    server = BodyServer("exact")
    out, _ = _call(TRANSPORTS[name], server, 60_000_000_000)
    assert isinstance(out, leasebeat.HttpResponse), out
    assert out.status == 200 and len(out.body) == MAX_BODY_BYTES


@pytest.mark.parametrize("name", TRANSPORTS)
def test_reading_stops_at_the_deadline(name: str) -> None:
    server = BodyServer("trickle")
    out, _ = _call(TRANSPORTS[name], server, 300_000_000)
    assert isinstance(out, leasebeat.TransportError), out
    assert out.kind is leasebeat.TransportFailure.TIMEOUT
    # The abandoned attempt's connection was closed: the server saw it (the
    # trickle alone would take 10,000 s to reach SEND_LIMIT).
    assert server.closed_by_client == [True]
    assert server.sent[0] < SEND_LIMIT
    # And no helper thread is left reading.
    for _ in range(int(WAIT_S / 0.05)):
        if not any(t.name == "leasebeat-http" for t in threading.enumerate()):
            break
        time.sleep(0.05)
    assert not any(t.name == "leasebeat-http" for t in threading.enumerate())
