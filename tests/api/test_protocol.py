"""`convtune serve`'s HTTP protocol turns Nagle off even on a listener uvicorn bound with
proto 0 (its --workers > 1 path), where asyncio itself leaves it on."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from uvicorn.protocols.http.h11_impl import H11Protocol

from api.protocol import NoDelayH11Protocol


@pytest.fixture
def accepted() -> Iterator[socket.socket]:
    """The server side of a loopback TCP connection accepted on a proto-0 listener."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # as uvicorn binds it
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    yield server
    for s in (server, client, listener):
        s.close()


class _Transport:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.sock if name == "socket" else default


def test_sets_tcp_nodelay_then_serves(monkeypatch: pytest.MonkeyPatch,
                                      accepted: socket.socket) -> None:
    served: list[Any] = []
    monkeypatch.setattr(H11Protocol, "connection_made", lambda self, t: served.append(t))
    monkeypatch.setattr(NoDelayH11Protocol, "_arm", lambda self, *seconds: None)  # no loop here
    monkeypatch.setattr(NoDelayH11Protocol, "_header_timeout_s", 1.0, raising=False)
    assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 0
    transport = _Transport(accepted)
    protocol = NoDelayH11Protocol.__new__(NoDelayH11Protocol)  # state is H11Protocol's
    protocol.connection_made(transport)  # type: ignore[arg-type]
    assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    assert served == [transport]


def test_serve_runs_uvicorn_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import uvicorn
    from typer.testing import CliRunner

    from tuner.cli import app

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: calls.append(kwargs))
    result = CliRunner().invoke(app, ["serve", "--workers", "2", "--port", "8123"])
    assert result.exit_code == 0, result.output
    assert calls[0]["http"] == "api.protocol:NoDelayH11Protocol"
    assert calls[0]["workers"] == 2
