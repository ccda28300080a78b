"""The public Python API: find_algorithms, find_best_algorithm, convolve."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from algorithms.problem import DTYPES, ConvProblem, pair
from algorithms.registry import get_algorithm
from db.engine import open_store
from tuner import results as R
from tuner.devices import backend_of, get_runtime, parse_device
from tuner.results import AlgorithmResult
from tuner.runtime import TimingPolicy
from tuner.tuning import Tuner, validate_workspace_limit


def _tuner(db: str | None, policy: TimingPolicy | None = None) -> Tuner:
    return Tuner(open_store(db), policy=policy)


def _check_problem(problem: Any) -> ConvProblem:
    if not isinstance(problem, ConvProblem):
        raise ValueError(f"problem must be a ConvProblem, got {type(problem).__name__}")
    return problem


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
    limit, 0: only algorithms without workspace); `mode` is "auto", "cached" or "tune".
    """
    problem = _check_problem(problem)
    return _tuner(db).find(problem, parse_device(device), workspace_limit, mode=mode)


def find_best_algorithm(
    problem: ConvProblem,
    device: str | None = None,
    workspace_limit: int | None = None,
    db: str | None = None,
    *,
    mode: str = "auto",
) -> AlgorithmResult:
    """The fastest usable algorithm under `workspace_limit`; NoUsableAlgorithm if none."""
    problem = _check_problem(problem)
    return _tuner(db).best(problem, parse_device(device), workspace_limit, mode=mode)


@dataclass(frozen=True)
class Convolution:
    """The output of one convolution and how it was computed."""

    y: Any
    algorithm: str
    config: str
    device: str
    elapsed_ms: float
    problem: ConvProblem


def _where(x: Any) -> str:
    """The canonical device an array lives on: "cpu" or "cuda:N"."""
    if isinstance(x, np.ndarray):
        return "cpu"
    dlpack_device = getattr(x, "__dlpack_device__", None)
    if dlpack_device is not None:  # CuPy, PyTorch, JAX...: (device type, index)
        kind, index = (int(v) for v in dlpack_device())
        if kind == _DLPACK_CPU:
            return "cpu"
        if kind == _DLPACK_CUDA:
            return f"cuda:{index}"
        raise ValueError(f"arrays on DLPack device type {kind} are not supported")
    # hasattr is not enough: a property may raise (torch does when requires_grad is set).
    try:
        getattr(x, "__cuda_array_interface__")  # noqa: B009
    except AttributeError:
        return "cpu"
    except Exception:  # it is a GPU array, whatever it refuses
        pass
    device = getattr(x, "device", None)
    return f"cuda:{int(getattr(device, 'id', None) or getattr(device, 'index', None) or 0)}"


_DLPACK_CPU, _DLPACK_CUDA = 1, 2  # kDLCPU, kDLCUDA in DLPack's device-type enum


def _dtype_name(array: Any, what: str) -> str:
    name = str(getattr(array, "dtype", ""))
    name = name.removeprefix("torch.")
    if name not in DTYPES:
        raise ValueError(f"{what} has dtype {name or type(array).__name__!r}; "
                         f"expected one of {sorted(DTYPES)}")
    return name


def problem_for(
    x_shape: tuple[int, ...],
    w_shape: tuple[int, ...],
    *,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    dtype: str = "float32",
) -> ConvProblem:
    """The ConvProblem of x (n, c, h, w) and w (k, c/groups, r, s); ValueError if they clash."""
    if len(x_shape) != 4:
        raise ValueError(f"x must be 4-D (n, c, h, w), got shape {tuple(x_shape)}")
    if len(w_shape) != 4:
        raise ValueError(f"w must be 4-D (k, c/groups, r, s), got shape {tuple(w_shape)}")
    n, c, h, w = (int(v) for v in x_shape)
    k, cg, r, s = (int(v) for v in w_shape)
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise ValueError(f"groups must be a positive int, got {groups!r}")
    if cg * groups != c:
        raise ValueError(
            f"shape mismatch: x has c={c} channels but w has {cg} input channels per group "
            f"x groups={groups} = {cg * groups}"
        )
    return ConvProblem(
        n=n, c=c, h=h, w=w, k=k, r=r, s=s,
        pad=pair(padding, "padding"), stride=pair(stride, "stride"),
        dilation=pair(dilation, "dilation"), groups=groups, dtype=dtype,
    )


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
) -> Convolution:
    """`convolve`, also saying which algorithm ran and how long it took."""
    workspace_limit = validate_workspace_limit(workspace_limit)
    lives_on = _where(x)
    if _where(w) != lives_on:
        raise ValueError(f"x is on {lives_on} but w is on {_where(w)}")
    device = parse_device(device) if device is not None else lives_on
    if device != lives_on:
        raise ValueError(f"device={device!r} but the inputs live on {lives_on}")
    runtime = get_runtime(device)
    xa, wa = runtime.adopt(x), runtime.adopt(w)
    if xa is None or wa is None:
        raise ValueError(f"x and w must be arrays on {device}")
    dtype = _dtype_name(xa, "x")
    if _dtype_name(wa, "w") != dtype:
        raise ValueError(f"x is {dtype} but w is {_dtype_name(wa, 'w')}: pass the same dtype")
    problem = problem_for(
        tuple(xa.shape), tuple(wa.shape), stride=stride, padding=padding,
        dilation=dilation, groups=groups, dtype=dtype,
    )
    backend = backend_of(device)
    tuner = _tuner(db)
    if algorithm is None:
        chosen = tuner.best(problem, device, workspace_limit)
    else:
        chosen = _named(tuner, problem, device, backend, algorithm, workspace_limit)
    impl = get_algorithm(backend, chosen.algorithm)
    xa, wa = runtime.contiguous(xa, dtype), runtime.contiguous(wa, dtype)
    y = runtime.empty(problem.output_shape, dtype)
    workspace = runtime.workspace(impl.workspace_bytes(problem, chosen.config))
    with runtime.activate():
        start = time.perf_counter()
        impl.run(xa, wa, y, workspace, problem, chosen.config)
        runtime.synchronize()
        elapsed = (time.perf_counter() - start) * 1e3
    return Convolution(y, chosen.algorithm, chosen.config, device, elapsed, problem)


def _named(
    tuner: Tuner,
    problem: ConvProblem,
    device: str,
    backend: str,
    name: str,
    workspace_limit: int | None,
) -> AlgorithmResult:
    """The named algorithm's best stored configuration, else its first that fits."""
    impl = get_algorithm(backend, name)
    support = impl.supports(problem)
    if not support:
        raise ValueError(f"algorithm {name!r} does not support {problem.describe()}: "
                         f"{support.reason}")
    candidates, _ = tuner.candidates(problem, backend)
    fitting = [
        c for c in candidates
        if c.algorithm.name == name
        and (workspace_limit is None or c.workspace_bytes <= workspace_limit)
    ]
    if not fitting:
        raise ValueError(f"algorithm {name!r} needs more workspace than "
                         f"workspace_limit={workspace_limit} for {problem.describe()}")
    try:
        ranked = tuner.find_candidates(problem, device, workspace_limit, mode="cached")
    except LookupError:
        ranked = []
    for result in ranked:
        if result.algorithm == name and result.usable:
            return result
    first = fitting[0]
    return AlgorithmResult(
        algorithm=name, config=first.config, status=R.OK, time_ms=None,
        workspace_bytes=first.workspace_bytes, source=R.NOT_MEASURED,
    )


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
) -> Any:
    """Convolve `x` (n, c, h, w) with `w` (k, c/groups, r, s) where they live.

    Uses the tuned best algorithm (tuning first if this problem is new) or the named
    one. NumPy in, NumPy out on the CPU; CuPy out for GPU inputs (CuPy arrays, or anything
    with `__cuda_array_interface__` / DLPack, adopted without a copy). Same dtype as `x`.
    """
    return run_convolution(
        x, w, stride=stride, padding=padding, dilation=dilation, groups=groups,
        device=device, workspace_limit=workspace_limit, algorithm=algorithm, db=db,
    ).y
