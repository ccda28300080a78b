"""The cost model's inputs: numbers describing a problem, a device and a candidate.

One row per (problem, device, algorithm, config). Trees split on thresholds, so raw sizes
serve as well as their logarithms; the derived quantities (FLOPs, bytes moved, arithmetic
intensity, output size) are what lets a tree generalise from layers it has seen to ones it
has not. Categories (dtype, math, direction) are small codes; the algorithm is one-hot over
the names the model was trained on; a config's numbers ("128x64x8", "chunk=16") are read
positionally, since each algorithm writes its own and the one-hot tells them apart.
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

#: Numbers read from a config name, in order; more than any shipped config has (3).
CONFIG_NUMBERS = 4
#: What "all" in a config ("chunk=all": the whole batch at once) reads as: larger than
#: any batch, so a tree puts it past every numeric chunk.
_ALL = float(2**30)
_NUMBER = re.compile(r"\d+(?:\.\d+)?|all")

PROBLEM_COLUMNS: tuple[str, ...] = (
    "n", "c", "h", "w", "k", "r", "s", "stride_h", "stride_w", "pad_h", "pad_w",
    "dilation_h", "dilation_w", "groups", "c_per_group", "k_per_group", "depthwise",
    "out_h", "out_w", "log_flops", "log_output", "log_bytes", "intensity",
    "dtype_bytes", "dtype", "math", "direction",
)
DEVICE_COLUMNS: tuple[str, ...] = ("units",)
CANDIDATE_COLUMNS: tuple[str, ...] = (
    "log_workspace", *(f"config{i}" for i in range(CONFIG_NUMBERS)),
)
_DTYPE_CODES = {name: i for i, name in enumerate(sorted(DTYPES))}


@functools.lru_cache(maxsize=65536)
def _problem_vector(problem: ConvProblem) -> tuple[float, ...]:
    out_h, out_w = problem.out_hw
    moved = sum(math.prod(shape) for shape in problem.operand_shapes) * problem.itemsize
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
    }
    return tuple(float(values[name]) for name in PROBLEM_COLUMNS)


def problem_vector(problem: ConvProblem) -> tuple[float, ...]:
    """The PROBLEM_COLUMNS values of a problem (cached: a find asks for each many times)."""
    return _problem_vector(problem)


#: A config number that is not there ("default" has none). Not NaN: scikit-learn 1.9's
#: binning fails on a column that is NaN throughout, as these are in a CPU-only store.
NO_NUMBER = -1.0


@functools.lru_cache(maxsize=4096)
def config_numbers(config: str) -> tuple[float, ...]:
    """The first CONFIG_NUMBERS numbers in a config name, NO_NUMBER where there are fewer."""
    found = [_ALL if t == "all" else float(t) for t in _NUMBER.findall(config)]
    found = found[:CONFIG_NUMBERS]
    return tuple(found + [NO_NUMBER] * (CONFIG_NUMBERS - len(found)))


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
                     math.log1p(s.workspace_bytes), *config_numbers(s.config))
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
