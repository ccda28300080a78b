"""The HTTP/1.1 protocol `convtune serve` runs: uvicorn's h11 one, with Nagle turned off.

With --workers > 1 uvicorn binds the shared listening socket with proto 0, accepted sockets
inherit it, and asyncio only sets TCP_NODELAY on sockets that say IPPROTO_TCP (uvicorn issue
#3149). Every keep-alive response then waited ~40 ms on the client's delayed ACK: 44 ms per
cached find with two workers against 7 ms with one (BENCHMARKS.md). Setting the option per
connection here works whatever uvicorn does with the listener.
"""

from __future__ import annotations

import asyncio
import socket

from uvicorn.protocols.http.h11_impl import H11Protocol


class NoDelayH11Protocol(H11Protocol):
    """uvicorn's h11 protocol that sets TCP_NODELAY on every TCP connection it serves."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Disable Nagle's algorithm, then serve as usual."""
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().connection_made(transport)


#: What uvicorn's `http` setting takes to use it (an import string reaches worker processes).
HTTP_PROTOCOL = f"{__name__}:{NoDelayH11Protocol.__qualname__}"
