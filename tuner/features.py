"""The cost model's inputs: numbers describing a problem, a device and a candidate.

One row per (problem, device, algorithm, config). Trees split on thresholds, so raw sizes
serve as well as their logarithms; the derived quantities (FLOPs, bytes moved, arithmetic
intensity, output size, the implicit GEMM's M, N and K) are what lets a tree generalise
from layers it has seen to ones it has not. Categories (dtype, math, direction) are small
codes; the algorithm is one-hot over the names the model was trained on; a config's name is
read by field (`config_numbers`: the leading tile, pipeline stages, split-K slices, wgmma
groups in flight, NHWC, and other numbers in order), since one position meant a K-step in
one tile and a stage count in the next.

A candidate's `Work` (algorithms.base: its blocks, the tiles' fill, its launches), asked
of the implementation the running code registers, says what a tree cannot derive from
thresholds on sizes: how many waves of blocks a tile size makes on this many units, how
much of its tiles overhang the output, and how many fixed launch costs a run pays.
A configuration the running code does not offer for the problem (a stored row of a
removed one) gets NO_NUMBER there. What each input is worth: BENCHMARKS.md, "Cost model".
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from algorithms.problem import DIRECTIONS, DTYPES, MATHS, ConvProblem
from algorithms.registry import get_algorithm

#: What a config name says, by field: its leading tile "AxB[xC]" ("256x128x32"), "-sN"
#: pipeline stages, "-kN" split-K slices, "-fN" wgmma groups left in flight, "nhwc" and "-ws"
#: (warp-specialized) (1 or 0 each), then up to two other numbers in order ("chunk=16",
#: "f4x4", direct's "16x16k8").
CONFIG_COLUMNS: tuple[str, ...] = ("tile0", "tile1", "tile2", "stages", "split", "in_flight",
                                   "nhwc", "ws", "number0", "number1")
#: What "all" in a config ("chunk=all": the whole batch at once) reads as: larger than
#: any batch, so a tree puts it past every numeric chunk.
_ALL = float(2**30)
_NUMBER = re.compile(r"\d+(?:\.\d+)?|all")
_TILE = re.compile(r"(\d+)x(\d+)(?:x(\d+))?")
_TAGGED = re.compile(r"-([skf])(\d+)")
_WS = re.compile(r"-ws\b")

PROBLEM_COLUMNS: tuple[str, ...] = (
    "n", "c", "h", "w", "k", "r", "s", "stride_h", "stride_w", "pad_h", "pad_w",
    "dilation_h", "dilation_w", "groups", "c_per_group", "k_per_group", "depthwise",
    "out_h", "out_w", "log_flops", "log_output", "log_bytes", "intensity",
    "dtype_bytes", "dtype", "math", "direction", "log_gemm_m", "log_gemm_n", "log_gemm_k",
)
DEVICE_COLUMNS: tuple[str, ...] = ("units",)
WORK_COLUMNS: tuple[str, ...] = ("log_blocks", "waves", "last_wave", "fill", "log_launches")
CANDIDATE_COLUMNS: tuple[str, ...] = ("log_workspace", *CONFIG_COLUMNS, *WORK_COLUMNS)
_DTYPE_CODES = {name: i for i, name in enumerate(sorted(DTYPES))}


@functools.lru_cache(maxsize=65536)
def _problem_vector(problem: ConvProblem) -> tuple[float, ...]:
    out_h, out_w = problem.out_hw
    moved = sum(math.prod(shape) for shape in problem.operand_shapes) * problem.itemsize
    gemm_m, gemm_n, gemm_k = gemm_sizes(problem)
    values: dict[str, float] = {
        "n": problem.n, "c": problem.c, "h": problem.h, "w": problem.w, "k": problem.k,
        "r": problem.r, "s": problem.s, "stride_h": problem.stride[0],
        "stride_w": problem.stride[1], "pad_h": problem.pad[0], "pad_w": problem.pad[1],
        "dilation_h": problem.dilation[0], "dilation_w": problem.dilation[1],
        "groups": problem.groups, "c_per_group": problem.c // problem.groups,
        "k_per_group": problem.k // problem.groups,
        "depthwise": float(problem.groups > 1 and problem.groups == problem.c == problem.k),
        "out_h": out_h, "out_w": out_w, "log_flops": math.log(problem.flops),
        "log_output": math.log(problem.n * problem.k * out_h * out_w),
        "log_bytes": math.log(moved), "intensity": problem.flops / moved,
        "dtype_bytes": problem.itemsize, "dtype": _DTYPE_CODES[problem.dtype],
        "math": MATHS.index(problem.math), "direction": DIRECTIONS.index(problem.direction),
        "log_gemm_m": math.log(gemm_m), "log_gemm_n": math.log(gemm_n),
        "log_gemm_k": math.log(gemm_k),
    }
    return tuple(float(values[name]) for name in PROBLEM_COLUMNS)


def gemm_sizes(problem: ConvProblem) -> tuple[int, int, int]:
    """(M, N, K) of the problem's direction as one group's implicit GEMM; backward_data's
    runs over dx's pixels, each against every tap (a stride makes some products zero)."""
    out_h, out_w = problem.out_hw
    cg, kg, taps = problem.c // problem.groups, problem.k // problem.groups, problem.r * problem.s
    if problem.direction == "backward_data":
        return problem.n * problem.h * problem.w, cg, kg * taps
    if problem.direction == "backward_filter":
        return kg, cg * taps, problem.n * out_h * out_w
    return problem.n * out_h * out_w, kg, cg * taps


def problem_vector(problem: ConvProblem) -> tuple[float, ...]:
    """The PROBLEM_COLUMNS values of a problem (cached: a find asks for each many times)."""
    return _problem_vector(problem)


#: A config number that is not there ("default" has none). Not NaN: scikit-learn 1.9's
#: binning fails on a column that is NaN throughout, as these are in a CPU-only store.
NO_NUMBER = -1.0


@functools.lru_cache(maxsize=4096)
def config_numbers(config: str) -> tuple[float, ...]:
    """The CONFIG_COLUMNS of a config name, NO_NUMBER where it says nothing of one."""
    tile = [NO_NUMBER] * 3
    rest = config
    if found := _TILE.match(config):
        tile = [float(g) if g else NO_NUMBER for g in found.groups()]
        rest = config[found.end():]
    tags = dict.fromkeys("skf", NO_NUMBER)
    for tag, value in _TAGGED.findall(rest):
        tags[tag] = float(value)
    rest = _TAGGED.sub("", rest)
    others = [_ALL if t == "all" else float(t) for t in _NUMBER.findall(rest)][:2]
    return (*tile, tags["s"], tags["k"], tags["f"], float("nhwc" in rest),
            float(_WS.search(rest) is not None), *others, *[NO_NUMBER] * (2 - len(others)))


@functools.lru_cache(maxsize=65536)
def work_vector(kind: str, algorithm: str, config: str, problem: ConvProblem,
                units: int) -> tuple[float, ...]:
    """The WORK_COLUMNS of a candidate on a device of `kind` with `units` units, from its
    implementation's `work`; NO_NUMBER throughout where the running code does not offer
    the configuration for the problem (or has no such algorithm)."""
    try:
        implementation = get_algorithm(kind, algorithm)  # ValueError: unknown kind or name
        work = getattr(implementation, "work", None)
        if work is None or config not in _offered(kind, algorithm, problem):
            return (NO_NUMBER,) * len(WORK_COLUMNS)
        found = work(problem, config)
    except (ValueError, KeyError, ZeroDivisionError):  # or a problem the algorithm refuses
        return (NO_NUMBER,) * len(WORK_COLUMNS)
    if found.blocks > 0 and units > 0:
        waves = found.blocks / units
        last = (found.blocks % units or units) / units  # busy share of the last wave
        blocks = (math.log(found.blocks), waves, last)
    else:
        blocks = (NO_NUMBER,) * 3
    return (*blocks, found.fill, math.log(found.launches))


@functools.lru_cache(maxsize=4096)
def _offered(kind: str, algorithm: str, problem: ConvProblem) -> frozenset[str]:
    # Once per (algorithm, problem), not per candidate: a prediction for an unseen problem
    # asked each of its 20-40 candidates, and each asked for the whole list again (about
    # 40% of a layer's prediction, profiled on the H100 measurements' ResNet-50 layers).
    return frozenset(get_algorithm(kind, algorithm).configs(problem))


@dataclass(frozen=True)
class Sample:
    """One candidate of one problem on one device: what the model reads (and, when
    training, the measured time it learns)."""

    problem: ConvProblem
    units: int
    algorithm: str
    config: str
    workspace_bytes: int
    time_ms: float | None = None
    kind: str = ""  # the device's kind ("cpu", "cuda"), whose implementations say `work`
    #: Which device measured it (training rows only; not a feature): a problem's rows are
    #: compared with the fastest of the same device's.
    device: str = ""


@dataclass(frozen=True)
class Encoder:
    """Turns samples into a feature matrix; the algorithm vocabulary is fixed at training."""

    algorithms: tuple[str, ...]

    @classmethod
    def for_samples(cls, samples: Sequence[Sample]) -> Encoder:
        """An encoder knowing every algorithm in `samples`."""
        return cls(tuple(sorted({s.algorithm for s in samples})))

    @property
    def columns(self) -> tuple[str, ...]:
        """Column names, in matrix order."""
        return (*PROBLEM_COLUMNS, *DEVICE_COLUMNS, *CANDIDATE_COLUMNS,
                *(f"algorithm={a}" for a in self.algorithms))

    def knows(self, algorithm: str) -> bool:
        """Whether the model was trained on measurements of `algorithm`."""
        return algorithm in self.algorithms

    def matrix(self, samples: Sequence[Sample]) -> np.ndarray:
        """One row per sample, `columns` wide, float64."""
        index = {a: i for i, a in enumerate(self.algorithms)}
        width = len(self.columns)
        onehot_at = width - len(self.algorithms)
        out = np.zeros((len(samples), width))
        for row, s in enumerate(samples):
            fixed = (*problem_vector(s.problem), float(s.units),
                     math.log1p(s.workspace_bytes), *config_numbers(s.config),
                     *work_vector(s.kind, s.algorithm, s.config, s.problem, s.units))
            out[row, :onehot_at] = fixed
            if s.algorithm in index:
                out[row, onehot_at + index[s.algorithm]] = 1.0
        return out


def log_ms_per_flop(samples: Sequence[Sample]) -> np.ndarray:
    """The training target: log(time_ms / FLOPs), one per sample (all must carry a time).

    Trees predict piecewise constants and cannot extrapolate a trend, so they learn the
    time per FLOP (which varies over a narrow range) instead of the time itself (which
    spans six orders of magnitude); log(time_ms) is the target plus log(FLOPs).
    """
    return np.array([math.log(_time(s) / s.problem.flops) for s in samples])


def _time(sample: Sample) -> float:
    if sample.time_ms is None or sample.time_ms <= 0:
        raise ValueError(f"sample {sample.algorithm}/{sample.config} has no positive time")
    return sample.time_ms


def problem_of(key: Mapping[str, Any]) -> ConvProblem:
    """A stored problem key as a ConvProblem (cached: training reads each key many times)."""
    return _from_key(tuple(sorted(key.items())))


@functools.lru_cache(maxsize=65536)
def _from_key(items: tuple[tuple[str, Any], ...]) -> ConvProblem:
    return ConvProblem.from_key(dict(items))
