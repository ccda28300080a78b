"""The float64 reference convolution: the oracle for tests and for the tuner's verification."""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from algorithms.problem import ConvProblem

#: einsum copies the windows of each batch chunk into one (n*oh*ow, cg*r*s) float64 matrix:
#: keeping that copy near this size lets GPU-sized problems verify without tens of GB.
CHUNK_BYTES = 256 << 20


def reference_conv(x: np.ndarray, w: np.ndarray, problem: ConvProblem) -> np.ndarray:
    """Cross-correlate NumPy `x` (n, c, h, w) with `w` (k, c/g, r, s) in float64."""
    if tuple(x.shape) != problem.input_shape or tuple(w.shape) != problem.filter_shape:
        raise ValueError(
            f"reference_conv: shapes {x.shape} and {w.shape} do not match {problem.describe()}"
        )
    (ph, pw), (sh, sw), (dh, dw) = problem.pad, problem.stride, problem.dilation
    g, cg, kg = problem.groups, problem.c // problem.groups, problem.k // problem.groups
    out_h, out_w = problem.out_hw
    xp = np.pad(np.asarray(x, dtype=np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    # Windows of the dilated footprint, then keep every dilation-th tap and stride-th origin.
    win = sliding_window_view(xp, (problem.dilated_r, problem.dilated_s), axis=(2, 3))
    win = win[:, :, : (out_h - 1) * sh + 1 : sh, : (out_w - 1) * sw + 1 : sw, ::dh, ::dw]
    w64 = np.asarray(w, dtype=np.float64)
    y = np.empty(problem.output_shape, dtype=np.float64)
    per_image = out_h * out_w * cg * problem.r * problem.s * 8
    chunk = max(1, CHUNK_BYTES // per_image)
    for gi in range(g):
        ws = w64[gi * kg : (gi + 1) * kg]  # (kg, cg, r, s)
        for n0 in range(0, problem.n, chunk):
            xs = win[n0 : n0 + chunk, gi * cg : (gi + 1) * cg]  # (n, cg, oh, ow, r, s)
            y[n0 : n0 + chunk, gi * kg : (gi + 1) * kg] = np.einsum(
                "ncpqrs,kcrs->nkpq", xs, ws, optimize=True
            )
    return y


def relative_error(y: np.ndarray, ref: np.ndarray) -> float:
    """‖y - ref‖ / ‖ref‖ in float64 (0 when both are zero)."""
    diff = np.linalg.norm((np.asarray(y, dtype=np.float64) - ref).ravel())
    norm = np.linalg.norm(ref.ravel())
    return float(diff / norm) if norm else float(diff)


def max_abs_error(y: np.ndarray, ref: np.ndarray) -> float:
    """Largest absolute difference, in float64."""
    return float(np.max(np.abs(np.asarray(y, dtype=np.float64) - ref))) if ref.size else 0.0


#: Relative-error tolerances by (dtype, algorithm family): FFT rounds more than GEMM paths.
TOLERANCES: dict[str, dict[str, float]] = {
    "float64": {"default": 1e-10, "fft": 1e-9},
    "float32": {"default": 1e-5, "fft": 1e-4},
    "float16": {"default": 2e-3, "fft": 4e-3},
}


def tolerance(dtype: str, algorithm: str) -> float:
    """The relative error a correct `algorithm` may show in `dtype`."""
    table = TOLERANCES[dtype]
    return table.get(algorithm, table["default"])
