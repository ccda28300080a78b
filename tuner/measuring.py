"""Measuring candidates on one device: verify each against the float64 reference, then time it.

The runtime is passed in (Triton-style: the benchmarker is a parameter), so tests give a
fake one instead of patching globals. A failing candidate is data, not a crash: its row
says `failed` or `wrong_result` with the reason.
"""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from algorithms.problem import ConvProblem
from algorithms.reference import max_abs_error, reference, relative_error, tolerance
from algorithms.runtime import Runtime, TimingPolicy
from db.rows import MeasurementRow, utcnow
from tuner import results as R
from tuner.candidates import Candidate
from tuner.version import TUNER_VERSION


@dataclass(frozen=True)
class Measured:
    """The rows of one measuring pass; `fault` says why it stopped early, if it did."""

    rows: list[MeasurementRow]
    fault: str | None = None


class Measurer:
    """Verifies and times candidates of one problem on one runtime."""

    def __init__(self, runtime: Runtime, policy: TimingPolicy, rng: np.random.Generator) -> None:
        self.runtime = runtime
        self.policy = policy
        self.rng = rng

    def measure(self, problem: ConvProblem, candidates: Sequence[Candidate]) -> Measured:
        """One row per candidate, in order; stops after a candidate that kills the device.

        Inputs are fresh random values (never zeros); outputs are compared with the float64
        reference before anything is timed.
        """
        if not candidates:
            return Measured([])
        runtime = self.runtime
        # The operands of the problem's direction: (x, w) -> y, (dy, w) -> dx, (x, dy) -> dw.
        a_shape, b_shape, out_shape = problem.operand_shapes
        x = runtime.random(a_shape, problem.dtype, self.rng)
        w = runtime.random(b_shape, problem.dtype, self.rng)
        y = runtime.empty(out_shape, problem.dtype)
        ref = reference(runtime.to_numpy(x, problem.dtype), runtime.to_numpy(w, problem.dtype),
                        problem)
        rows: list[MeasurementRow] = []
        with runtime.activate():  # run() enqueues on the current device's stream
            for cand in candidates:
                rows.append(self._one(problem, cand, x, w, y, ref))
                fault = runtime.fault() if rows[-1].status == R.FAILED else None
                if fault is not None:
                    return Measured(rows, fault)
        return Measured(rows)

    def _one(
        self, problem: ConvProblem, cand: Candidate, x: Any, w: Any, y: Any, ref: np.ndarray
    ) -> MeasurementRow:
        runtime = self.runtime
        algorithm, config = cand.algorithm, cand.config
        row: dict[str, Any] = {
            "algorithm": algorithm.name, "config": config, "impl_hash": cand.impl_hash,
            "time_ms": None, "spread_ms": None, "min_ms": None, "reps": 0,
            "workspace_bytes": cand.workspace_bytes, "max_error": None, "rel_error": None,
            "error": None, "measured_at": utcnow(), "tuner_version": TUNER_VERSION,
        }
        try:
            workspace = runtime.workspace(cand.workspace_bytes)
            if workspace is not None:
                workspace.fill(0xFF)  # reads of unwritten workspace show up as NaN
            y.fill(np.nan)  # unwritten outputs show up as NaN
            algorithm.run(x, w, y, workspace, problem, config)
            runtime.synchronize()
            out = runtime.to_numpy(y, problem.dtype)
            rel = relative_error(out, ref)
            row["max_error"] = max_abs_error(out, ref)
            row["rel_error"] = rel
            limit = tolerance(problem.dtype, algorithm.name, problem.math)
            if not np.isfinite(rel) or rel > limit:
                row["status"] = R.WRONG_RESULT
                row["error"] = f"relative error {rel:.3g} exceeds {limit:g}"
                return MeasurementRow(**row)

            def run() -> None:
                algorithm.run(x, w, y, workspace, problem, config)

            timing = runtime.time(run, self.policy)
            row.update(
                status=R.OK, time_ms=timing.median_ms, spread_ms=timing.spread_ms,
                min_ms=timing.min_ms, reps=len(timing.times_ms),
            )
        except Exception as exc:
            row["status"] = R.FAILED
            last = traceback.extract_tb(exc.__traceback__)[-1:]
            where = f" at {last[0].filename.rsplit('/', 1)[-1]}:{last[0].lineno}" if last else ""
            row["error"] = f"{type(exc).__name__}: {exc}{where}"[:2000]
        return MeasurementRow(**row)
