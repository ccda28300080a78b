"""The public Python API: find_algorithms, find_best_algorithm, plan, convolve (and
problem_for, from tuner.calls, which reads a problem off array shapes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from algorithms.problem import ConvProblem
from tuner.calls import execute, problem_for, shape_argument
from tuner.devices import parse_device
from tuner.plans import Plan
from tuner.results import AlgorithmResult
from tuner.service import service


def find_algorithms(
    problem: ConvProblem,
    device: str | None = None,
    workspace_limit: int | None = None,
    db: str | None = None,
    *,
    mode: str = "auto",
) -> list[AlgorithmResult]:
    """Every registered algorithm once, fastest usable first, like cudnnFind.

    Answers from the database what this (problem, device) has measured with the current
    code, and measures (then stores) the rest. `workspace_limit` is in bytes (None: no
    limit, 0: only algorithms without workspace). `mode` (see Tuner.find): "auto" (or its
    synonym "exhaustive"), "cached", "tune", "fast" (measure only the cost model's predicted
    top $CONVTUNE_FAST_K, then the winner's close rivals) or "heuristic" (measure nothing,
    predict what is not stored).
    """
    return service(db).find(problem, parse_device(device), workspace_limit, mode=mode)


def find_best_algorithm(
    problem: ConvProblem,
    device: str | None = None,
    workspace_limit: int | None = None,
    db: str | None = None,
    *,
    mode: str = "auto",
) -> AlgorithmResult:
    """The fastest usable algorithm under `workspace_limit`; NoUsableAlgorithm if none.

    `mode` as in find_algorithms: with "heuristic" the answer may be a prediction (its
    source "predicted"), with "fast" the best of the candidates measured.
    """
    return service(db).best(problem, parse_device(device), workspace_limit, mode=mode)


def plan(
    problem: ConvProblem,
    device: str | None = None,
    workspace_limit: int | None = None,
    db: str | None = None,
    *,
    algorithm: str | None = None,
) -> Plan:
    """A reusable, thread-safe plan of the tuned best algorithm: `plan(x, w, out=None)`.

    Tunes first if the problem is new. Calling the plan looks nothing up, enqueues on the
    caller's current stream and allocates nothing when `out` is given (see tuner.plans).
    """
    return service(db).plan(problem, parse_device(device), workspace_limit, algorithm=algorithm)


@dataclass(frozen=True)
class Convolution:
    """The output of one convolution and how it was computed."""

    y: Any
    algorithm: str
    config: str
    device: str
    elapsed_ms: float | None  # None when not timed
    problem: ConvProblem


def run_convolution(
    x: Any,
    w: Any,
    *,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    device: str | None = None,
    workspace_limit: int | None = None,
    algorithm: str | None = None,
    db: str | None = None,
    math: str = "fp32",
    out: Any = None,
    timed: bool = True,
    check_finite: bool = False,
) -> Convolution:
    """`convolve`, also saying which algorithm ran and, when `timed`, how long it took.

    Timing waits for this convolution's own work (CUDA events on the caller's stream),
    never for the whole device; `timed=False` returns as soon as the work is enqueued.
    """
    chosen, y, elapsed = execute(x, w, None, "forward", (stride, padding, dilation, groups),
                                  device, workspace_limit, algorithm, db, math, out, timed,
                                  check_finite)
    return Convolution(y, chosen.algorithm, chosen.config, chosen.device, elapsed,
                       chosen.problem)


def convolve(
    x: Any,
    w: Any,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    device: str | None = None,
    workspace_limit: int | None = None,
    algorithm: str | None = None,
    db: str | None = None,
    math: str = "fp32",
    out: Any = None,
    check_finite: bool = False,
) -> Any:
    """Convolve `x` (n, c, h, w) with `w` (k, c/groups, r, s) where they live.

    Uses the tuned best algorithm (tuning first if this problem is new) or the named
    one, through a cached plan: the work is enqueued on the caller's current stream (CuPy's,
    or torch's for tensors) and nothing waits for it. The result is the caller's kind of
    array (NumPy, CuPy or torch), or `out` itself when given. Same dtype as `x`.

    NaN and infinity pass through, as in cuDNN: what they spread to depends on the algorithm
    (an FFT spreads one NaN over the whole output; direct, which skips the padding, never
    multiplies a weight by a padded zero, so a NaN weight misses the outputs whose window
    reads padding at its tap). `check_finite=True` refuses them with a
    ValueError naming the input instead (one pass over each input; waits on a GPU).
    """
    # run_convolution's work without its Convolution record: a call per layer of a model.
    return execute(x, w, None, "forward", (stride, padding, dilation, groups), device,
                    workspace_limit, algorithm, db, math, out, False, check_finite)[1]


def convolve_backward_data(
    dy: Any,
    w: Any,
    x_shape: tuple[int, ...],
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    device: str | None = None,
    workspace_limit: int | None = None,
    algorithm: str | None = None,
    db: str | None = None,
    math: str = "fp32",
    out: Any = None,
) -> Any:
    """dx (shape `x_shape`) of the convolution of x with `w`, from its output gradient `dy`.

    The problem is the forward one (x_shape, w's shape, geometry) with direction
    "backward_data": tuned, stored and planned like `convolve`, with the same arguments.
    """
    geometry = (stride, padding, dilation, groups)
    return execute(dy, w, shape_argument(x_shape, "x_shape"), "backward_data", geometry, device,
                    workspace_limit, algorithm, db, math, out, False)[1]


def convolve_backward_filter(
    x: Any,
    dy: Any,
    w_shape: tuple[int, ...],
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    device: str | None = None,
    workspace_limit: int | None = None,
    algorithm: str | None = None,
    db: str | None = None,
    math: str = "fp32",
    out: Any = None,
) -> Any:
    """dw (shape `w_shape`) of the convolution of `x` with w, from its output gradient `dy`.

    Summed over the batch. Direction "backward_filter"; otherwise like `convolve`.
    """
    geometry = (stride, padding, dilation, groups)
    return execute(x, dy, shape_argument(w_shape, "w_shape"), "backward_filter", geometry, device,
                    workspace_limit, algorithm, db, math, out, False)[1]


__all__ = ["Convolution", "convolve", "convolve_backward_data", "convolve_backward_filter",
           "find_algorithms", "find_best_algorithm", "plan", "problem_for", "run_convolution"]
