"""`convtune export / import / push / pull / tune --onnx`, and the /v1/bundles routes."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from db.engine import open_store
from tests.fleet.helpers import gpu, row, seed, stored
from tests.tuner.fakes import small_problem
from tuner.bundles import read_bundle
from tuner.cli import main

H100 = gpu()
A100 = gpu("NVIDIA A100-SXM4-80GB", "8.0", 108)


def populate(url: str) -> None:
    seed(open_store(url), H100, small_problem(), [row("direct", 1.0), row("fft", 2.0)])
    seed(open_store(url), A100, small_problem(n=4), [row("direct", 3.0)])


def test_export_import_commands(
    db_url: str, other_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    populate(db_url)
    assert main(["export"]) == 0  # --db defaults to $CONVTUNE_DB_URL
    out, err = capsys.readouterr()
    assert read_bundle(out).counts()["measurements"] == 3 and "exported 3" in err
    path = tmp_path / "h100.bundle"
    assert main(["export", "--db", db_url, "--device", H100.fingerprint[:12], "-o", str(path)]) == 0
    assert main(["import", "--db", other_url, str(path)]) == 0
    assert "2 added" in capsys.readouterr().err
    assert main(["import", "--db", other_url, str(path)]) == 0
    assert "0 added, 0 replaced by newer, 2 unchanged" in capsys.readouterr().err
    assert len(stored(open_store(other_url))) == 2


def test_import_refuses_a_corrupt_file_with_one_line(
    db_url: str, other_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    populate(db_url)
    assert main(["export", "--db", db_url, "-o", str(tmp_path / "b")]) == 0
    text = (tmp_path / "b").read_text()
    (tmp_path / "cut").write_text(text[: len(text) // 2])
    capsys.readouterr()
    assert main(["import", "--db", other_url, str(tmp_path / "cut")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("convtune: error: bundle") and err.count("\n") == 1
    assert stored(open_store(other_url)) == []
    assert main(["import", "--db", other_url, str(tmp_path / "nope")]) == 1
    assert main(["export", "--db", db_url, "--device", "zzzzzzzz"]) == 1


def test_tune_onnx_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    onnx = pytest.importorskip("onnx")
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="c1", pads=[1, 1, 1, 1]),
         helper.make_node("Conv", ["y", "w2"], ["z"], name="dw", pads=[1, 1, 1, 1], group=4)],
        "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w"),
                     numpy_helper.from_array(np.ones((4, 1, 3, 3), np.float32), "w2")],
    )
    path = tmp_path / "tiny.onnx"
    onnx.save(helper.make_model(graph), str(path))
    argv = ["tune", "--onnx", str(path), "--batch", "1,2", "--device", "cpu", "--json"]
    assert main(argv) == 0
    tuned = json.loads(capsys.readouterr().out)
    assert tuned["model"] == "tiny.onnx"
    assert [(r["layer"], r["batch"], r["problem"]["groups"]) for r in tuned["results"]] == [
        ("c1", 1, 1), ("dw", 1, 4), ("c1", 2, 1), ("dw", 2, 4)]
    assert all(r["status"] == "ok" for r in tuned["results"])
    assert main(["tune", "--device", "cpu"]) == 1
    assert main(["tune", "--model", "alexnet", "--onnx", str(path)]) == 1
    assert "exactly one of --model" in capsys.readouterr().err


# --- against a running server --------------------------------------------------------------
TOKEN = "s3cret-token"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A real `convtune serve` app under uvicorn on 127.0.0.1: (base URL, its store URL)."""
    uvicorn = pytest.importorskip("uvicorn")
    from api.app import create_app
    from api.settings import Settings

    store_url = f"sqlite:///{tmp_path / 'server.db'}"
    app = create_app(Settings(db_url=store_url, api_token=TOKEN))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not srv.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", store_url
    finally:
        srv.should_exit = True
        thread.join(10)


def test_push_and_pull(
    server: tuple[str, str], db_url: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    base, server_db = server
    populate(db_url)
    capsys.readouterr()
    assert main(["push", "--server", base]) == 1  # no token
    assert "401" in capsys.readouterr().err
    assert main(["push", "--server", base, "--token", TOKEN]) == 0
    assert "3 added" in capsys.readouterr().err
    monkeypatch.setenv("CONVTUNE_API_TOKEN", TOKEN)
    assert main(["push", "--server", base + "/"]) == 0
    assert "3 unchanged" in capsys.readouterr().err
    assert stored(open_store(server_db)) == stored(open_store(db_url))

    elsewhere = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    assert main(["pull", "--server", base, "--db", elsewhere, "--device", A100.fingerprint]) == 0
    assert [r["device"] for r in stored(open_store(elsewhere))] == [A100.fingerprint]
    assert main(["pull", "--server", base, "--db", elsewhere]) == 0
    assert stored(open_store(elsewhere)) == stored(open_store(db_url))
    assert main(["pull", "--server", base, "--device", "ffffffffff"]) == 1
    assert "404" in capsys.readouterr().err
    assert main(["pull", "--server", "http://127.0.0.1:9"]) == 1
    assert "cannot reach" in capsys.readouterr().err


def test_bundle_routes(db_url: str, tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from api.app import create_app
    from api.settings import Settings

    populate(db_url)
    server_db = f"sqlite:///{tmp_path / 'server.db'}"
    from tuner.bundles import export_bundle

    text = export_bundle(open_store(db_url))
    with TestClient(create_app(Settings(db_url=server_db, api_token=TOKEN))) as client:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert client.post("/v1/bundles", content=text).status_code == 401
        bad = client.post("/v1/bundles", content=text[:-40], headers=auth)
        assert bad.status_code == 400 and "bundle" in bad.json()["detail"]
        assert stored(open_store(server_db)) == []
        ok = client.post("/v1/bundles", content=text, headers=auth)
        assert ok.status_code == 200 and ok.json()["added"] == 3
        got = client.get("/v1/bundles", params={"device": H100.fingerprint[:8]})
        assert got.status_code == 200 and got.headers["content-type"].startswith(
            "application/x-ndjson")
        assert read_bundle(got.text).counts() == {"devices": 1, "problems": 1, "measurements": 2}
        assert client.get("/v1/bundles", params={"device": "ffffffff"}).status_code == 404


def test_deeply_nested_bundle_line_is_a_400(db_url: str, tmp_path: Path) -> None:
    # Issue 12 (6): a pushed bundle with a deeply nested JSON line gave a 500
    # (RecursionError) and dropped the keep-alive connection.
    from fastapi.testclient import TestClient

    from api.app import create_app
    from api.settings import Settings

    populate(db_url)
    import hashlib
    import json

    from tuner.bundles import export_bundle

    lines = export_bundle(open_store(db_url)).splitlines(keepends=True)
    nested = "[" * 200_000 + "]" * 200_000 + "\n"
    body = "".join([lines[0], nested, *lines[1:-1]])
    trailer = json.loads(lines[-1]) | {"sha256": hashlib.sha256(body.encode()).hexdigest()}
    hostile = body + json.dumps(trailer) + "\n"  # re-signed: only the nesting is wrong
    with TestClient(create_app(Settings(db_url=f"sqlite:///{tmp_path / 's.db'}"))) as client:
        refused = client.post("/v1/bundles", content=hostile)
        assert refused.status_code == 400, refused.text
        assert "nested too deeply" in refused.json()["detail"]
        assert client.get("/healthz").status_code == 200  # the connection still serves


# Mutation gap: `convtune import -` (the README's `cat fleet.bundle | convtune import -`)
# was never given a bundle on stdin: it could have read a file named '-'.
def test_import_dash_reads_the_bundle_from_stdin(
    db_url: str, other_url: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import io
    import sys

    import numpy as np

    rng = np.random.default_rng()
    ms = [float(t) for t in rng.uniform(0.1, 40.0, size=3)]
    seed(open_store(db_url), H100, small_problem(n=int(rng.integers(1, 9))),
         [row("direct", ms[0]), row("fft", ms[1])])
    seed(open_store(db_url), A100, small_problem(n=int(rng.integers(9, 17))),
         [row("direct", ms[2])])
    assert main(["export", "--db", db_url]) == 0
    bundle = capsys.readouterr().out
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(bundle.encode())))
    assert main(["import", "--db", other_url, "-"]) == 0
    assert "3 measurements of 2 devices: 3 added" in capsys.readouterr().err
    assert stored(open_store(other_url)) == stored(open_store(db_url))
