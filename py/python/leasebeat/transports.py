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
abandoned at the deadline. No proxy is taken from the environment and
redirects are not followed.
"""

from __future__ import annotations

import asyncio
import http.client
import socket
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from ._runner import HttpResponse, Request, TransportError

__all__ = ["UrllibTransport", "HttpxTransport", "AsyncHttpxTransport", "AsyncUrllibTransport"]


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


def _with_deadline(fn: Any, deadline_ns: int | None) -> HttpResponse:
    """Runs ``fn()`` on a helper thread; raises TransportError("timeout") at the deadline."""
    if deadline_ns is None:
        return fn()  # type: ignore[no-any-return]
    box: list[Any] = []
    done = threading.Event()

    def work() -> None:
        try:
            box.append(fn())
        except BaseException as e:  # noqa: BLE001 (handed to the caller)
            box.append(e)
        done.set()

    threading.Thread(target=work, name="leasebeat-http", daemon=True).start()
    left = _remaining_s(deadline_ns)
    if not done.wait(left) or not box:
        raise TransportError("timeout", "the whole-attempt deadline passed")
    r = box[0]
    if isinstance(r, TransportError):
        raise r
    if isinstance(r, BaseException):
        raise TransportError(_kind_of(r), repr(r)) from r
    return r  # type: ignore[no-any-return]


class UrllibTransport:
    """A blocking transport on ``urllib.request`` (no dependency)."""

    def __init__(self, base_url: str, api_key: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())

    def _send(self, request: Request, deadline_ns: int | None) -> HttpResponse:
        req = urllib.request.Request(
            self.base_url + request.path, data=request.body, method="POST", headers=_headers(request, self.api_key)
        )
        timeout = _remaining_s(deadline_ns)
        try:
            with self._opener.open(req, timeout=timeout if timeout is not None else None) as r:
                return HttpResponse(r.status, r.headers, r.read())
        except urllib.error.HTTPError as e:
            with e:
                return HttpResponse(e.code, e.headers, e.read())
        except http.client.HTTPException as e:
            raise TransportError("reset", repr(e)) from e

    def __call__(self, request: Request, deadline_ns: int | None, /) -> HttpResponse:
        return _with_deadline(lambda: self._send(request, deadline_ns), deadline_ns)


class HttpxTransport:
    """A blocking transport on an ``httpx.Client`` you own (pip install leasebeat[httpx])."""

    def __init__(self, client: Any, base_url: str, api_key: str) -> None:
        self.client = client
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key

    def _send(self, request: Request, deadline_ns: int | None) -> HttpResponse:
        timeout = _remaining_s(deadline_ns)
        r = self.client.post(
            self.base_url + request.path,
            content=request.body,
            headers=_headers(request, self.api_key),
            timeout=timeout,
            follow_redirects=False,
        )
        return HttpResponse(r.status_code, r.headers, r.content)

    def __call__(self, request: Request, deadline_ns: int | None, /) -> HttpResponse:
        return _with_deadline(lambda: self._send(request, deadline_ns), deadline_ns)


class AsyncHttpxTransport:
    """An asyncio transport on an ``httpx.AsyncClient`` you own; the deadline
    cancels the whole request (``asyncio.wait_for``)."""

    def __init__(self, client: Any, base_url: str, api_key: str) -> None:
        self.client = client
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key

    async def _send(self, request: Request, timeout: float | None) -> HttpResponse:
        r = await self.client.post(
            self.base_url + request.path,
            content=request.body,
            headers=_headers(request, self.api_key),
            timeout=timeout,
            follow_redirects=False,
        )
        return HttpResponse(r.status_code, r.headers, r.content)

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
