"""benchmarks/bench_lookups.py runs on the CPU: its three lookups timed, JSON written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import bench_lookups


def test_times_each_lookup_and_writes_json(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "lookups.json"
    assert bench_lookups.main(["--rounds", "1", "--number", "50", "--json", str(out)]) == 0
    us = json.loads(out.read_text())["us_per_call"]
    assert set(us) == {"cached find", "call plan", "open store"}
    assert all(0 < value < 1e4 for value in us.values())
    assert "| cached find |" in capsys.readouterr().out


def test_refuses_a_count_below_one() -> None:
    with pytest.raises(SystemExit) as stopped:
        bench_lookups.main(["--rounds", "0"])
    assert stopped.value.code == 2
