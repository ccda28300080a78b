"""16-bit storage on the device side of tests: problems by precision, bfloat16 as bits.

The GPU backend (and the emulator standing in for it) holds bfloat16 as uint16 bits, the
kernels' bf16_t; these helpers round to those bits and read them back.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from algorithms.problem import ConvProblem
from algorithms.reference import tolerance


def make_problem(dtype: str = "float32", math: str = "fp32", **kw: Any) -> ConvProblem:
    """A problem of `dtype` under `math`."""
    return ConvProblem(**kw, dtype=dtype, math=math)


def storage_dtype(dtype: str) -> np.dtype:
    """The NumPy dtype that holds `dtype` on the host (bfloat16: its uint16 bits)."""
    return np.dtype(np.uint16 if dtype == "bfloat16" else dtype)


def to_storage(a: np.ndarray, dtype: str) -> np.ndarray:
    """`a` rounded to `dtype` in its storage form (bfloat16: round to nearest even)."""
    if dtype != "bfloat16":
        return a.astype(dtype)
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def to_float(a: np.ndarray, dtype: str) -> np.ndarray:
    """The values of storage array `a` as float64."""
    if dtype == "bfloat16":
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return a.astype(np.float64)


def nan_storage(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """A NaN-filled storage array (bfloat16 NaN is 0xFFFF)."""
    if dtype == "bfloat16":
        return np.full(shape, 0xFFFF, np.uint16)
    return np.full(shape, np.nan, dtype)


def tolerance_for(dtype: str, math: str, algorithm: str) -> float:
    """The relative error a correct `algorithm` may show for this dtype and math mode."""
    return tolerance(dtype, algorithm, math)
