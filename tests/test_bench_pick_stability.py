"""benchmarks/pick_stability.py: each tuning into its own store, and its usage errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import pick_stability as S


def test_each_tuning_measures_afresh(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    S.main(["--tunings", "2", "--problem", "n1,c4,h6,w5,k3,r3,s3,pad1", "--out", str(out)])
    tunings = json.loads(out.read_text())["tunings"]
    assert len(tunings) == 2
    for tuning in tunings:  # a fresh store each time: every candidate measured, none reused
        assert tuning["pick"] in tuning["times"]
        assert len(tuning["times"]) >= 3
        assert all(reps >= 1 and ms > 0 for ms, _, reps in tuning["times"].values())
    said = capsys.readouterr().out
    assert said.count(": pick ") == 2 and "picks: " in said


@pytest.mark.parametrize("args, why", [
    (["--problem", "n1,c4,x5"], "unexpected keyword argument 'x'"),
    (["--problem", "n1,c4,h"], "is not a name followed by an int"),
    (["--tunings", "0"], "--tunings must be at least 1"),
])
def test_usage_errors_are_one_line(args: list[str], why: str,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        S.main(args)
    assert exit_.value.code == 2
    assert why in capsys.readouterr().err.strip().splitlines()[-1]
