"""Fleet commands' error paths: one line on stderr and a non-zero exit, never a traceback;
and the /v1/bundles route answers 400 (not 500) for bundles that cannot be stored."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest

from db.engine import open_store
from tests.fleet.helpers import gpu, row, seed, stored
from tests.fleet.test_bundle_validation import edited, set_field
from tests.tuner.fakes import small_problem
from tuner.bundles import export_bundle, read_bundle
from tuner.cli import main
from tuner.fleet import pull_bundle, push_bundle


@pytest.mark.parametrize("server", ["http://[::1", "http://host:notaport", "http://", "https:///"])
@pytest.mark.parametrize("command", ["push", "pull"])
def test_invalid_server_url_is_one_line(
    command: str, server: str, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    open_store(db_url)  # push only reads: a store that is not there is its own error
    assert main([command, "--server", server, "--token", "t"] if command == "push"
                else [command, "--server", server]) == 1
    err = capsys.readouterr().err
    assert err.startswith("convtune: error: ") and err.count("\n") == 1, err
    assert "--server" in err or "cannot reach" in err


@pytest.mark.parametrize(
    "answer", [b"<html>hello</html>", b"[1, 2]", b'"ok"', b""], ids=["html", "list", "str", "empty"]
)
def test_push_to_something_that_is_not_convtune_is_a_clear_error(answer: bytes) -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=answer))
    with httpx.Client(transport=transport) as client, pytest.raises(
        RuntimeError, match="convtune import summary"
    ):
        push_bundle("http://hub:8000", "bundle", client=client)


def test_pull_of_something_that_is_not_a_bundle_is_one_line(
    db_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=b"<html/>"))
    real = httpx.Client

    def client(*args: object, **kwargs: object) -> httpx.Client:
        return real(transport=transport)

    monkeypatch.setattr(httpx, "Client", client)
    assert pull_bundle("http://hub:8000") == "<html/>"
    assert main(["pull", "--server", "http://hub:8000"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("convtune: error: not a convtune bundle") and err.count("\n") == 1


def test_import_of_an_unstorable_bundle_is_one_line(
    db_url: str, other_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed(open_store(other_url), gpu(), small_problem(), [row("direct", 1.0)])
    text = edited(export_bundle(open_store(other_url)), set_field("measurement", device=["x"]))
    path = tmp_path / "bad.bundle"
    path.write_text(text)
    assert main(["import", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("convtune: error: bundle line") and err.count("\n") == 1
    assert stored(open_store(db_url)) == []


def test_bundle_route_refuses_unstorable_bundles_with_400(db_url: str, other_url: str) -> None:
    from api.app import create_app
    from api.settings import Settings
    from tests.api.conftest import TestClient

    seed(open_store(other_url), gpu(), small_problem(), [row("direct", 1.0)])
    good = export_bundle(open_store(other_url))
    with TestClient(create_app(Settings(db_url=db_url)), raise_server_exceptions=False) as client:
        for change in (set_field("measurement", problem={"a": 1}),
                       set_field("measurement", workspace_bytes=2**64),
                       set_field("measurement", error="\x00")):
            response = client.post("/v1/bundles", content=edited(good, change))
            assert response.status_code == 400, response.text
            assert json.loads(response.text)["detail"].startswith("bundle line")
        assert stored(open_store(db_url)) == []
        assert client.post("/v1/bundles", content=good).json()["added"] == 1


#: `convtune export` with writes limited to LIMIT bytes once the bundle is read (as a full
#: disk would): the limit is lifted at exit, so that SQLite can still close its store.
EXPORT_ON_A_FULL_DISK = """
import atexit, resource, signal, sys
from tuner.cli import main
from tuner.service import Service

limit, argv = int(sys.argv[1]), sys.argv[2:]
read = Service.export_bundle

def export_bundle(self, **kwargs):
    text = read(self, **kwargs)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG from write(), not a kill
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    atexit.register(resource.setrlimit, resource.RLIMIT_FSIZE, (soft, hard))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    return text

Service.export_bundle = export_bundle
sys.exit(main(argv))
"""


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="RLIMIT_FSIZE is POSIX")
def test_export_that_cannot_write_keeps_the_old_file(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Review finding 4: `export -o FILE` wrote in place: a full disk left neither the old
    # file nor a whole bundle (a truncated one instead), and the error ("[Errno 28] No
    # space left on device") did not name the file.
    seed(open_store(db_url), gpu(), small_problem(), [row("direct", 1.0), row("fft", 2.0)])
    size = len(export_bundle(open_store(db_url)).encode())
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    target = out_dir / "fleet.bundle"
    target.write_text("precious\n")
    target.chmod(0o640)
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", EXPORT_ON_A_FULL_DISK, str(size // 2), "export", "--db", db_url,
         "-o", str(target)],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith(f"convtune: error: cannot write {target}: ")
    assert done.stderr.count("\n") == 1, done.stderr
    assert target.read_text() == "precious\n"
    assert [p.name for p in out_dir.iterdir()] == ["fleet.bundle"]  # no temporary left
    # Written whole when it can be, over the old file, whose permissions it keeps.
    assert main(["export", "--db", db_url, "-o", str(target)]) == 0
    assert read_bundle(target.read_text()).counts()["measurements"] == 2
    assert target.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in out_dir.iterdir()] == ["fleet.bundle"]
    assert capsys.readouterr().err == f"exported 2 measurements to {target}\n"


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="giving a link to another user needs root")
def test_export_refuses_another_users_link_in_a_shared_directory(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Bug (a review of security): `export -o /tmp/x.bundle` resolved a symlink another user
    # had planted there and overwrote the file it named (Linux's fs.protected_symlinks rule
    # sidestepped by writing to the resolved path).
    seed(open_store(db_url), gpu(), small_problem(), [row("direct", 1.0)])
    shared, victim = tmp_path / "shared", tmp_path / "victim.conf"
    shared.mkdir()
    shared.chmod(0o1777)
    victim.write_text("precious\n")
    planted = shared / "fleet.bundle"
    planted.symlink_to(victim)
    os.lchown(planted, 65534, 65534)
    assert main(["export", "--db", db_url, "-o", str(planted)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"convtune: error: cannot write {planted}: {planted} is another "
                          "user's symlink") and err.count("\n") == 1, err
    assert victim.read_text() == "precious\n"
    # Through a planted link to a folder of the other user's (the review of the session's
    # changes: only the last component was checked).
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "x.bundle").symlink_to(victim)
    folder_link = shared / "bundles"
    folder_link.symlink_to(theirs)
    for made in (theirs, theirs / "x.bundle", folder_link):
        os.lchown(made, 65534, 65534)
    assert main(["export", "--db", db_url, "-o", str(folder_link / "x.bundle")]) == 1
    assert f"{folder_link} is another user's symlink" in capsys.readouterr().err
    assert victim.read_text() == "precious\n"
    os.lchown(planted, os.geteuid(), os.getegid())  # one's own link is followed, as before
    assert main(["export", "--db", db_url, "-o", str(planted)]) == 0
    assert read_bundle(victim.read_text()).counts()["measurements"] == 1


def _seeded(db_url: str) -> str:
    """Seed the store with random measurements; the bundle `export` writes of it."""
    rng = np.random.default_rng()
    ms = [float(t) for t in rng.uniform(0.1, 40.0, size=2)]
    seed(open_store(db_url), gpu(), small_problem(n=int(rng.integers(1, 9))),
         [row("direct", ms[0]), row("fft", ms[1])])
    return export_bundle(open_store(db_url))


# Mutation gap: `export -o` to something that is not a regular file (a FIFO here) must
# write into it, not rename a new regular file over it (which left the reader waiting on a
# FIFO that no longer had a name, and a stray file in its place).
def test_export_to_a_fifo_writes_into_it(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = _seeded(db_url)
    assert len(text.encode()) < 60_000  # the pipe's buffer takes it whole: no reader thread
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    fifo = out_dir / "bundle.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # so the export's open() returns
    try:
        assert main(["export", "--db", db_url, "-o", str(fifo)]) == 0
        got = b""
        with contextlib.suppress(BlockingIOError):
            while data := os.read(reader, 65536):
                got += data
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(fifo.lstat().st_mode)  # still the FIFO
    assert [p.name for p in out_dir.iterdir()] == [fifo.name]
    assert read_bundle(got.decode()).counts() == read_bundle(text).counts()
    assert capsys.readouterr().err == f"exported 2 measurements to {fifo}\n"


# Bug (found writing the test above): `export -o /dev/stdout` (or /dev/fd/1) with stdout
# redirected to a regular file (`>> log`, or `{ echo ...; convtune export ...; } > log`)
# renamed a new file over the one the shell had open: what the file held before was lost,
# and whatever the shell wrote to it afterwards went to the replaced, unlinked file. The
# descriptor is now written through, where it stands.
@pytest.mark.parametrize(("name", "flags"), [("/dev/stdout", os.O_APPEND), ("/dev/fd/1", 0)],
                         ids=["stdout-appending", "fd1-positioned"])
def test_export_to_a_redirected_stdout_writes_through_it(
    name: str, flags: int, db_url: str, tmp_path: Path
) -> None:
    text = _seeded(db_url)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    log = out_dir / "log"
    earlier, later = (f"{word} {os.urandom(8).hex()}\n" for word in ("earlier", "later"))
    log.write_text(earlier)
    inode = log.stat().st_ino
    saved = os.dup(1)
    opened = os.open(log, os.O_WRONLY | flags)  # as `>> log`, or `> log` after an echo
    os.lseek(opened, 0, os.SEEK_END)
    try:
        os.dup2(opened, 1)
        code = main(["export", "--db", db_url, "-o", name])
        os.write(1, later.encode())  # the shell's next command, on the same descriptor
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(opened)
    assert code == 0
    assert log.stat().st_ino == inode  # the very file the shell opened
    got = log.read_text()
    assert got.startswith(earlier) and got.endswith(later), got[:200]
    assert read_bundle(got[len(earlier):-len(later)]).counts() == read_bundle(text).counts()
    assert [p.name for p in out_dir.iterdir()] == ["log"]


# Mutation gap: https servers are accepted and a trailing slash dropped; a refusal (any
# status from 400) names the status and the server's "detail", cut to 200 characters; no
# token sends no Authorization header, and $CONVTUNE_API_TOKEN is a push's default token.
def test_push_urls_refusals_and_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    from tuner.fleet import _url

    assert _url(" https://hub.example:8443/ ") == "https://hub.example:8443/v1/bundles"
    seen: list[httpx.Request] = []
    answers = [httpx.Response(400, json={"detail": "bundle line 1: bad " + "x" * 300}),
               httpx.Response(502, text="<html>" + "y" * 300),
               httpx.Response(200, json={"added": 2})]

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answers.pop(0)

    monkeypatch.delenv("CONVTUNE_API_TOKEN", raising=False)
    monkeypatch.delenv("CONVTUNE_FLEET_KEY", raising=False)
    with httpx.Client(transport=httpx.MockTransport(answer)) as client:
        with pytest.raises(RuntimeError) as refused:
            push_bundle("http://hub:8000", "bundle", client=client)
        assert str(refused.value) == ("POST http://hub:8000/v1/bundles failed: HTTP 400: "
                                      "bundle line 1: bad " + "x" * 181)
        assert "authorization" not in seen[0].headers
        with pytest.raises(RuntimeError) as refused:  # not JSON: the text, cut the same
            push_bundle("http://hub:8000", "bundle", client=client)
        assert str(refused.value).endswith("HTTP 502: <html>" + "y" * 194)
        monkeypatch.setenv("CONVTUNE_API_TOKEN", "s3cret")
        assert push_bundle("http://hub:8000", "bundle", client=client) == {"added": 2}
        assert seen[2].headers["authorization"] == "Bearer s3cret"
