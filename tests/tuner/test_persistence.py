"""Results persist across processes; several processes can tune into one SQLite file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import json, sys
from tuner import ConvProblem, find_best_algorithm
n, mode = int(sys.argv[1]), sys.argv[2]
p = ConvProblem(n=n, c=4, h=10, w=9, k=6, r=3, s=3, pad=(1, 1))
best = find_best_algorithm(p, device="cpu", mode=mode)
print(json.dumps(best.as_dict()))
"""


def run(db_url: str, n: int, mode: str) -> subprocess.Popen[str]:
    env = {**os.environ, "CONVTUNE_DB_URL": db_url, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(n), mode],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def result(proc: subprocess.Popen[str]) -> dict:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return json.loads(out)


def test_second_process_answers_from_database(db_url: str) -> None:
    first = result(run(db_url, 2, "auto"))
    assert first["source"] == "fresh"
    # mode="cached" raises if anything would have to be measured: the answer must be stored.
    second = result(run(db_url, 2, "cached"))
    assert second["source"] == "measured here"
    assert (second["algorithm"], second["config"], second["time_ms"]) == (
        first["algorithm"],
        first["config"],
        first["time_ms"],
    )
    assert second["device"] == first["device"]


def test_processes_tune_concurrently_into_one_sqlite_file(db_url: str) -> None:
    procs = [run(db_url, n, "auto") for n in (1, 2, 3, 4)]
    answers = [result(p) for p in procs]
    assert all(a["status"] == "ok" for a in answers)
    again = [result(run(db_url, n, "cached")) for n in (1, 2, 3, 4)]
    assert all(a["source"] == "measured here" for a in again)
