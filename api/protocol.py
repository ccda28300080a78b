"""The HTTP/1.1 protocol `convtune serve` runs: uvicorn's h11 one, with Nagle turned off and
deadlines for slow partial requests.

Nagle: with --workers > 1 uvicorn binds the shared listening socket with proto 0, accepted
sockets inherit it, and asyncio only sets TCP_NODELAY on sockets that say IPPROTO_TCP
(uvicorn issue #3149). Every keep-alive response then waited ~40 ms on the client's delayed
ACK: 44 ms per cached find with two workers against 7 ms with one (BENCHMARKS.md). Setting
the option per connection here works whatever uvicorn does with the listener.

Deadlines: uvicorn's keep-alive timeout only runs between requests, so a client that sends
half a request line, or headers a byte at a time, or less body than it announced, held a
connection (and, in the body case, a running request) for ever. A request's headers must
now arrive within $CONVTUNE_HEADER_TIMEOUT_S of its first byte (or of connecting), and its
body within $CONVTUNE_BODY_TIMEOUT_S of its headers; past either the client gets a 408 and
the connection is closed.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from tuner.env import http_timeouts

_TIMEOUT_BODY = b"request timeout: the request was not received in time\n"
#: Written raw: h11 will not send a response before it has parsed a request.
REQUEST_TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\ncontent-length: " + str(len(_TIMEOUT_BODY)).encode() + b"\r\n\r\n"
    + _TIMEOUT_BODY
)


class NoDelayH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with TCP_NODELAY on every TCP connection, and header and body
    deadlines."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timeout_s, self._body_timeout_s = http_timeouts()
        self._deadline: asyncio.TimerHandle | None = None
        self._partial = False  # some bytes of a request's headers are in, not all of them

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Disable Nagle's algorithm, serve as usual, and give the headers their deadline."""
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().connection_made(transport)
        self._arm(self._header_timeout_s)

    def data_received(self, data: bytes) -> None:
        """Parse as usual; then move the deadline along with the request's progress."""
        waiting = self.conn.their_state is h11.IDLE
        if waiting and self._deadline is None:
            self._arm(self._header_timeout_s)  # the first byte of a keep-alive request
        self._partial = self._partial or (waiting and bool(data))
        super().data_received(data)
        state = self.conn.their_state
        if state is not h11.IDLE:
            self._partial = False
        if state is h11.SEND_BODY and waiting:
            self._arm(self._body_timeout_s)  # headers in: now the body's deadline
        elif state is not h11.IDLE and state is not h11.SEND_BODY:
            self._disarm()  # the whole request is in (or the connection is done)

    def connection_lost(self, exc: Exception | None) -> None:
        """Drop the deadline with the connection."""
        self._disarm()
        super().connection_lost(exc)

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        """408 and close; only close when a response has begun or no request has."""
        self._deadline = None
        if self.transport.is_closing():
            return
        if self.conn.their_state is h11.IDLE and not self._partial:
            self.transport.close()  # connected, never sent a byte: nothing to answer
            return
        # The current request's cycle, once its headers are in (else the last request's).
        current = self.cycle if self.conn.their_state is not h11.IDLE else None
        if current is not None and not current.response_complete:
            # The app may still be waiting for the body: it now sees a disconnect.
            current.disconnected = True
            current.message_event.set()
        if current is None or not current.response_started:
            self.transport.write(REQUEST_TIMEOUT_RESPONSE)
        self.transport.close()


#: What uvicorn's `http` setting takes to use it (an import string reaches worker processes).
HTTP_PROTOCOL = f"{__name__}:{NoDelayH11Protocol.__qualname__}"
