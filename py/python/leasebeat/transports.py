"""Bundled transports for the runners: urllib (standard library) and httpx
(the optional extra ``leasebeat[httpx]``).

Each sends ``POST {base_url}{request.path}`` with ``X-Cycles-API-Key``,
``X-Idempotency-Key`` (equal to the body's key), ``Content-Type:
application/json`` and exactly ``request.body``; returns any complete HTTP
response (any status) as an HttpResponse; and maps every failure without a
response to TransportError: "timeout" (the deadline passed), "connect" (the
connection could not be made) or "reset" (anything else: reset, early EOF,
protocol error). Each enforces the *whole-attempt* deadline: a per-phase
socket timeout (urllib's ``timeout=``, httpx's ``timeout=``) bounds each read,
not the attempt, so the attempt runs on a helper thread (or task) that is
abandoned at the deadline; the abandoned attempt's connection is shut down
then, so its thread stops reading. No proxy is taken from the environment and
redirects are not followed.

A response body is read up to ``MAX_BODY_BYTES`` (1 MiB), as the Rust driver
does: a longer body (declared by ``Content-Length``, or found while reading a
chunked or close-delimited body) is not read further, its connection is
closed, and the response is returned with its status, its headers and an
empty body, which the core classifies by status as a response without a
usable body (P-3: a 200 is then ambiguous, a 404 ``not_found``).
"""

from __future__ import annotations

import asyncio
import http.client
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from ._runner import HttpResponse, Request, TransportError

__all__ = ["UrllibTransport", "HttpxTransport", "AsyncHttpxTransport", "AsyncUrllibTransport", "MAX_BODY_BYTES"]

#: The largest response body a bundled transport reads: 1 MiB, the Rust
#: driver's ``MAX_BODY_BYTES``. A longer body is not read (see the module's
#: documentation).
MAX_BODY_BYTES = 1 << 20
#: Bytes asked for per read of a body.
_CHUNK = 64 * 1024


def _headers(request: Request, api_key: str) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "X-Cycles-API-Key": api_key,
        "X-Idempotency-Key": request.key,
    }


def _remaining_s(deadline_ns: int | None) -> float | None:
    if deadline_ns is None:
        return None
    left = (deadline_ns - time.monotonic_ns()) / 1e9
    if left <= 0:
        raise TransportError("timeout", "the attempt deadline passed before sending")
    return left


def _kind_of(e: BaseException) -> str:
    """Maps a stdlib/httpx exception to timeout, connect or reset."""
    name = type(e).__name__
    if isinstance(e, urllib.error.URLError) and not isinstance(e, urllib.error.HTTPError):
        reason = e.reason
        if isinstance(reason, BaseException):
            return _kind_of(reason)
        return "connect"
    if isinstance(e, (TimeoutError, socket.timeout)) or name.endswith("Timeout") or "Timeout" in name:
        return "timeout"
    if isinstance(e, (ConnectionRefusedError, socket.gaierror)) or name in ("ConnectError",):
        return "connect"
    return "reset"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class _Abort:
    """The deadline's hold on an attempt running on a helper thread: at the
    deadline the caller marks it aborted and shuts the attempt's socket down,
    which ends a read blocked on it at once (a ``close()`` from another thread
    would not); the helper thread then stops."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.aborted = False
        self._sock: Any = None

    def attach(self, sock: Any) -> None:
        """The attempt's socket, once connected (shut down at once if the
        deadline already passed)."""
        with self._lock:
            self._sock = sock
            late = self.aborted
        if late:
            _shutdown(sock)
            raise TransportError("timeout", "the whole-attempt deadline passed")

    def abort(self) -> None:
        with self._lock:
            self.aborted = True
            sock = self._sock
        if sock is not None:
            _shutdown(sock)

    def check(self, deadline_ns: int | None) -> None:
        """Raises TransportError("timeout") once aborted or past the deadline."""
        if self.aborted or (deadline_ns is not None and time.monotonic_ns() >= deadline_ns):
            raise TransportError("timeout", "the whole-attempt deadline passed while reading the response")


def _shutdown(sock: Any) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except (OSError, ValueError):
        pass  # already closed


def _declared_too_long(headers: Any) -> bool:
    """Whether the response's Content-Length is over MAX_BODY_BYTES."""
    try:
        value = headers.get("content-length")
        return value is not None and int(str(value).strip()) > MAX_BODY_BYTES
    except (ValueError, TypeError):
        return False


def _read_capped(read: Callable[[int], bytes], before_read: Callable[[], None]) -> bytes | None:
    """Reads a body with ``read(n)`` (b"" at its end), calling
    ``before_read()`` before every read (which raises at the deadline).
    Returns the body, or None once it is over MAX_BODY_BYTES (read then
    stops: at most MAX_BODY_BYTES + 1 bytes are taken)."""
    parts: list[bytes] = []
    n = 0
    while True:
        before_read()
        chunk = read(min(_CHUNK, MAX_BODY_BYTES + 1 - n))
        if not chunk:
            return b"".join(parts)
        n += len(chunk)
        if n > MAX_BODY_BYTES:
            return None
        parts.append(chunk)


def _with_deadline(fn: Callable[[_Abort], HttpResponse], deadline_ns: int | None) -> HttpResponse:
    """Runs ``fn(abort)`` on a helper thread; raises TransportError("timeout")
    at the deadline, after aborting the attempt (its socket is shut down)."""
    abort = _Abort()
    if deadline_ns is None:
        return fn(abort)
    box: list[Any] = []
    done = threading.Event()

    def work() -> None:
        try:
            box.append(fn(abort))
        except BaseException as e:  # noqa: BLE001 (handed to the caller)
            box.append(e)
        done.set()

    threading.Thread(target=work, name="leasebeat-http", daemon=True).start()
    try:
        left = _remaining_s(deadline_ns)
    except TransportError:
        abort.abort()
        raise
    if not done.wait(left) or not box:
        abort.abort()
        raise TransportError("timeout", "the whole-attempt deadline passed")
    r = box[0]
    if isinstance(r, TransportError):
        raise r
    if isinstance(r, BaseException):
        raise TransportError(_kind_of(r), repr(r)) from r
    return r  # type: ignore[no-any-return]


class UrllibTransport:
    """A blocking transport on the standard library (no dependency): one
    ``http.client`` connection per attempt, as ``urllib.request`` makes (no
    proxy, no redirect, ``Connection: close``), so that the attempt's socket
    can be shut down at its deadline and its body read up to
    ``MAX_BODY_BYTES``."""

    def __init__(self, base_url: str, api_key: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        u = urllib.parse.urlsplit(self.base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"base_url must be an absolute http(s) URL, got {base_url!r}")
        self._https = u.scheme == "https"
        self._host = u.hostname
        self._port = u.port
        self._prefix = u.path

    def _send(self, request: Request, deadline_ns: int | None, abort: _Abort) -> HttpResponse:
        timeout = _remaining_s(deadline_ns)
        conn: http.client.HTTPConnection
        if self._https:
            conn = http.client.HTTPSConnection(self._host, self._port, timeout=timeout)
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=timeout)
        try:
            try:
                conn.connect()
            except (TimeoutError, socket.timeout) as e:
                raise TransportError("timeout", repr(e)) from e
            except OSError as e:
                raise TransportError("connect", repr(e)) from e
            sock = conn.sock
            abort.attach(sock)

            def before_read() -> None:
                abort.check(deadline_ns)
                if deadline_ns is not None:
                    # A blocked read ends at the deadline, not a full timeout later.
                    try:
                        sock.settimeout(max((deadline_ns - time.monotonic_ns()) / 1e9, 0.001))
                    except OSError:
                        pass  # the response is complete and its socket closed

            headers = _headers(request, self.api_key)
            headers["Connection"] = "close"
            conn.request("POST", self._prefix + request.path, body=request.body, headers=headers)
            before_read()
            r = conn.getresponse()
            body = None if _declared_too_long(r.headers) else _read_capped(r.read, before_read)
            return HttpResponse(r.status, r.headers, b"" if body is None else body)
        except http.client.HTTPException as e:
            raise TransportError("reset", repr(e)) from e
        finally:
            conn.close()

    def __call__(self, request: Request, deadline_ns: int | None, /) -> HttpResponse:
        return _with_deadline(lambda abort: self._send(request, deadline_ns, abort), deadline_ns)


def _identity(headers: dict[str, str]) -> dict[str, str]:
    """No compressed body (httpx asks for gzip by default): the bytes read are
    the bytes counted against MAX_BODY_BYTES, and one small compressed read
    cannot expand into a large one."""
    headers["Accept-Encoding"] = "identity"
    return headers


def _httpx_socket(response: Any) -> Any:
    """The socket under an httpx response, if httpcore tells it."""
    try:
        return response.extensions["network_stream"].get_extra_info("socket")
    except Exception:  # noqa: BLE001 (another transport below httpx)
        return None


class HttpxTransport:
    """A blocking transport on an ``httpx.Client`` you own (pip install leasebeat[httpx])."""

    def __init__(self, client: Any, base_url: str, api_key: str) -> None:
        self.client = client
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key

    def _send(self, request: Request, deadline_ns: int | None, abort: _Abort) -> HttpResponse:
        timeout = _remaining_s(deadline_ns)
        with self.client.stream(
            "POST",
            self.base_url + request.path,
            content=request.body,
            headers=_identity(_headers(request, self.api_key)),
            timeout=timeout,
            follow_redirects=False,
        ) as r:
            sock = _httpx_socket(r)
            if sock is not None:
                abort.attach(sock)
            if _declared_too_long(r.headers):
                body = None
            else:
                # Each network read as it arrives (a chunk size would make
                # httpx gather 64 KiB before yielding: no deadline check
                # between a trickle's reads).
                chunks = r.iter_bytes()
                body = _read_capped(lambda _n: next(chunks, b""), lambda: abort.check(deadline_ns))
            # Leaving the block closes the response; an unread rest of the
            # body closes its connection too.
            return HttpResponse(r.status_code, r.headers, b"" if body is None else body)

    def __call__(self, request: Request, deadline_ns: int | None, /) -> HttpResponse:
        return _with_deadline(lambda abort: self._send(request, deadline_ns, abort), deadline_ns)


class AsyncHttpxTransport:
    """An asyncio transport on an ``httpx.AsyncClient`` you own; the deadline
    cancels the whole request (``asyncio.wait_for``)."""

    def __init__(self, client: Any, base_url: str, api_key: str) -> None:
        self.client = client
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key

    async def _send(self, request: Request, timeout: float | None) -> HttpResponse:
        async with self.client.stream(
            "POST",
            self.base_url + request.path,
            content=request.body,
            headers=_identity(_headers(request, self.api_key)),
            timeout=timeout,
            follow_redirects=False,
        ) as r:
            if _declared_too_long(r.headers):
                return HttpResponse(r.status_code, r.headers, b"")
            parts: list[bytes] = []
            n = 0
            async for chunk in r.aiter_bytes():
                n += len(chunk)
                if n > MAX_BODY_BYTES:
                    return HttpResponse(r.status_code, r.headers, b"")
                parts.append(chunk)
            return HttpResponse(r.status_code, r.headers, b"".join(parts))

    async def __call__(self, request: Request, deadline_ns: int | None, /) -> HttpResponse:
        timeout = _remaining_s(deadline_ns)
        try:
            return await asyncio.wait_for(self._send(request, timeout), timeout)
        except TransportError:
            raise
        except (asyncio.TimeoutError, TimeoutError) as e:
            raise TransportError("timeout", "the whole-attempt deadline passed") from e
        except Exception as e:
            raise TransportError(_kind_of(e), repr(e)) from e


class AsyncUrllibTransport:
    """An asyncio transport on urllib (no dependency): each attempt runs on its
    own helper thread; the coroutine returns at the deadline."""

    def __init__(self, base_url: str, api_key: str) -> None:
        self._sync = UrllibTransport(base_url, api_key)
        self.base_url = self._sync.base_url
        self.api_key = api_key

    async def __call__(self, request: Request, deadline_ns: int | None, /) -> HttpResponse:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[HttpResponse] = loop.create_future()

        def work() -> None:
            try:
                r: Any = self._sync(request, deadline_ns)
            except BaseException as e:  # noqa: BLE001
                r = e
            def deliver() -> None:
                if fut.done():
                    return
                if isinstance(r, BaseException):
                    fut.set_exception(r)
                else:
                    fut.set_result(r)
            try:
                loop.call_soon_threadsafe(deliver)
            except RuntimeError:
                pass  # the loop is gone: the outcome is late and ignored

        threading.Thread(target=work, name="leasebeat-http", daemon=True).start()
        return await fut
