"""Code that runs in separate processes in the concurrency tests (importable under spawn)."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from algorithms.problem import ConvProblem
from db.claims import try_claim
from db.engine import close_stores, open_store
from tests.fleet.helpers import QUICK
from tests.fleet.helpers import algos as as_algorithms
from tests.tuner.fakes import Fake
from tuner.tuning import Tuner


class Logged(Fake):
    """A slow fake that appends one line to a log file every time it is run."""

    def __init__(self, name: str, log: str, configs: tuple[str, ...] = ("default",)) -> None:
        super().__init__(name, configs=configs)
        self.log = log

    def run(self, x: Any, w: Any, y: Any, workspace: Any, problem: ConvProblem,
            config: str) -> None:
        with open(self.log, "a", encoding="utf-8") as f:
            f.write(f"{os.getpid()}|{problem.describe()}|{self.name}|{config}\n")
        time.sleep(0.02)  # long enough for the other processes to collide with us
        super().run(x, w, y, workspace, problem, config)


def tune(url: str, log: str, keys: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    """Find every problem in a fresh process; (problem, algorithm, config, source) each."""
    close_stores()
    fakes = [Logged("direct", log), Logged("fft", log, configs=("a", "b"))]
    tuner = Tuner(open_store(url), policy=QUICK, algorithms=as_algorithms(*fakes), claim_ttl_s=30)
    out = []
    for key in keys:
        problem = ConvProblem.from_key(key)
        for r in tuner.find_candidates(problem, "cpu"):
            assert r.status == "ok", r
            out.append((problem.describe(), r.algorithm, r.config, r.source))
    return out


def hold_claim(url: str, fingerprint: str, problem: str, ttl_s: float) -> None:
    """Claim and never release (a hung tuner): print 'claimed', then sleep until killed."""
    with open_store(url).session() as session:
        assert try_claim(session=session, fingerprint=fingerprint, problem=problem,
                         owner=f"hung:{os.getpid()}:test", ttl_s=ttl_s)
    print("claimed", flush=True)
    time.sleep(120)


if __name__ == "__main__":
    hold_claim(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]))
