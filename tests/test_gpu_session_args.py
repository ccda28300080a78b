"""Every benchmark script that benchmarks/gpu_session.sh runs accepts the arguments the
session script gives it: a GPU call is 15 minutes a session, and a flag renamed in a script
but not in the session script would cost a whole step of it (argparse exits 2 at once)."""

from __future__ import annotations

import argparse
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_session.sh"
#: Steps that run other programs than python3 first (nvcc, compute-sanitizer, ncu): their
#: python3 invocations are those of the steps below or need those programs to be reached.
OTHER_PROGRAMS = {"sass", "sanitize", "profile"}
#: Steps that read the JSON of this call's bench steps, and run only after one.
READERS = {"model", "targets"}
#: A python3 that records its arguments (fields \x1f, calls \x1e) and writes "{}" where it
#: is given an --out, so that the steps reading earlier steps' JSON (model, targets) run too.
FAKE_PYTHON = r"""#!/bin/sh
printf '%s\037' "$@" >> "$ARGV_LOG"
printf '\036' >> "$ARGV_LOG"
prev=
for arg; do
    [ "$prev" = "--out" ] && echo '{}' > "$arg"
    prev=$arg
done
exit 0
"""


class _Parsed(Exception):
    """Raised in place of a script's work once its arguments parsed."""


def steps() -> list[str]:
    """The session script's steps, read off its `case` labels; those that read the bench
    steps' JSON (model, targets) last."""
    text = SCRIPT.read_text()
    labels = re.findall(r"^    ([a-z0-9_|]+)\)", text, flags=re.MULTILINE)
    found = [s for label in labels for s in label.split("|") if s not in OTHER_PROGRAMS]
    return sorted(found, key=lambda step: step in READERS)


def invocations(tmp_path: Path) -> list[list[str]]:
    """The python3 calls of a whole session run through every step with a recording
    python3 (the session script's own, not the test's)."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3").write_text(FAKE_PYTHON)
    (fake / "python3").chmod(0o755)
    log = tmp_path / "argv.log"
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "OUT": str(tmp_path / "out"),
           "ARGV_LOG": str(log), "SMOKE_STOPS": "0", "HOST_LAYER": "resnet50:res2.3x3",
           "DEADLINE_S": "0"}
    subprocess.run(["bash", str(SCRIPT), *steps()], cwd=ROOT, env=env, capture_output=True,
                   text=True, timeout=120, check=False)
    calls = log.read_text().split("\x1e")
    return [call.split("\x1f")[:-1] for call in calls if call]


def parse_only(script: Path, args: list[str]) -> None:
    """Run `script` as __main__ with `args` until its parser has parsed them; SystemExit
    (argparse's, status 2) where it refuses them."""
    def parsed(self: argparse.ArgumentParser, *a: object, **k: object) -> None:
        original(self, *a, **k)  # type: ignore[arg-type]
        raise _Parsed

    original = argparse.ArgumentParser.parse_args
    saved = sys.argv
    sys.argv = [str(script), *args]
    argparse.ArgumentParser.parse_args = parsed  # type: ignore[method-assign,assignment]
    try:
        runpy.run_path(str(script), run_name="__main__")
    except _Parsed:
        return
    finally:
        argparse.ArgumentParser.parse_args = original  # type: ignore[method-assign]
        sys.argv = saved
    raise AssertionError(f"{script.name} never parsed its arguments")


def test_every_benchmark_call_of_the_session_script_parses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    calls = [c for c in invocations(tmp_path) if c and c[0].startswith("benchmarks/")]
    scripts = {c[0] for c in calls}
    # The session's steps reach a dozen and more scripts: a broken recording reaches none.
    assert len(scripts) >= 15 and "benchmarks/bench_model.py" in scripts, sorted(scripts)
    refused = []
    for call in calls:
        try:
            parse_only(ROOT / call[0], call[1:])
        except SystemExit as exc:
            if exc.code not in (0, None):
                refused.append(f"{' '.join(call)}: {capsys.readouterr().err.strip()[-200:]}")
    assert refused == []


def test_a_flag_the_script_does_not_know_is_refused(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # The check above can fail: a call with a flag its script lacks exits 2.
    monkeypatch.syspath_prepend(str(ROOT))
    with pytest.raises(SystemExit) as exc:
        parse_only(ROOT / "benchmarks" / "bench_overhead.py", ["--device", "cuda", "--secs", "1"])
    assert exc.value.code == 2
