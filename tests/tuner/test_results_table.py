"""`convtune results` at 80 columns (issue 12, item 11): no line too long, no field cut."""

from __future__ import annotations

import numpy as np
import pytest

from algorithms.problem import ConvProblem
from db.engine import open_store
from tests.fleet.helpers import gpu, row, seed
from tuner.cli import main
from tuner.cli.tables import human_bytes

PROBLEM = ConvProblem(n=32, c=256, h=56, w=56, k=512, r=3, s=3, pad=1, stride=2, groups=2)


@pytest.mark.parametrize("width", [80, 100, 132])
def test_results_table_stays_readable(
    width: int, db_url: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Bug (issue 12 item 11): at 80 columns the table folded headers and values into
    # pieces ("algorit"/"hm", "implici"/"t_gemm"), and piped output ignored $COLUMNS.
    seed(open_store(db_url), gpu(), PROBLEM, [
        row("implicit_gemm", 12.3456, config="bn1024", workspace_bytes=123_456_789),
        row("fft", None, status="over_workspace_limit", workspace_bytes=9_876_543_210),
    ])
    monkeypatch.setenv("COLUMNS", str(width))
    assert main(["results", "--db", db_url]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= width, out
    assert "…" not in out
    words = {w for line in lines for w in line.split()}
    # Every field is whole: the device, each word of the problem, names, numbers, dates.
    for field in ["NVIDIA", "H100", "HBM3", *PROBLEM.describe().split(), "implicit_gemm",
                  "bn1024", "12.346", "118", "MiB", "9.2", "GiB", "2025-01-01", "00:00",
                  "algorithm", "workspace"]:
        assert field in words, (field, out)
    assert any(w.startswith("over_w") for w in words)


def test_human_bytes() -> None:
    assert [human_bytes(n) for n in (0, 512, 4096, 123_456_789, 2**40 * 1000)] == [
        "0 B", "512 B", "4 KiB", "118 MiB", "1000 TiB"]


# Mutation gap: `results --json` was only read for its total on an empty or freshly tuned
# store; its filters (--device, --status), --offset and the total over every page (not the
# page's length) went unchecked.
def test_results_json_filters_and_pages(
    db_url: str, rng: np.random.Generator, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    store = open_store(db_url)
    ours, theirs = gpu(), gpu(name="NVIDIA A100-SXM4-80GB", arch="8.0", units=108)
    times = [float(t) for t in rng.uniform(0.1, 50.0, size=4)]
    seed(store, ours, PROBLEM, [row("implicit_gemm", times[0], config="a"),
                                row("direct", times[1]),
                                row("fft", None, status="over_workspace_limit")])
    seed(store, theirs, PROBLEM, [row("direct", times[2]), row("fft", times[3])])
    argv = ["results", "--db", db_url, "--json", "--device", ours.fingerprint[:12],
            "--status", "ok"]
    assert main([*argv, "--limit", "1"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert main([*argv, "--limit", "1", "--offset", "1"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert (first["total"], first["offset"], second["total"], second["offset"]) == (2, 0, 2, 1)
    rows = first["results"] + second["results"]
    assert sorted(r["time_ms"] for r in rows) == sorted(times[:2])
    assert {r["device"] for r in rows} == {ours.fingerprint}


# Mutation gap: the title of an empty page ("showing 0-0") was never read: an empty store
# could have said "showing 1-0". Bug (found writing it): a page past the end of a store
# that holds some said "showing 0-<offset>", as if rows had been shown; every empty page
# now says "showing 0-0", and a page of rows its first and last row.
def test_results_table_title_names_the_rows_shown(
    db_url: str, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("COLUMNS", "132")
    open_store(db_url)  # an empty store, not a missing one
    assert main(["results", "--db", db_url]) == 0
    assert "0 measurements (showing 0-0)" in capsys.readouterr().out
    count = int(rng.integers(3, 7))
    times = [float(t) for t in rng.uniform(0.1, 50.0, size=count)]
    seed(open_store(db_url), gpu(), PROBLEM,
         [row("direct", t, config=f"c{i}") for i, t in enumerate(times)])
    past = count + int(rng.integers(0, 5))
    assert main(["results", "--db", db_url, "--offset", str(past)]) == 0
    assert f"{count} measurements (showing 0-0)" in capsys.readouterr().out
    offset = int(rng.integers(1, count - 1))
    assert main(["results", "--db", db_url, "--offset", str(offset), "--limit", "1"]) == 0
    assert f"{count} measurements (showing {offset + 1}-{offset + 1})" in \
        capsys.readouterr().out
