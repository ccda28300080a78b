"""Winograd F(2x2,3x3) and F(4x4,3x3) on the CPU: transforms as vector sums, one batched GEMM.

Forward only; 3x3 filters, stride 1, dilation 1, groups 1, any padding and size (see
algorithms/winograd.py for the matrices and the limits). float32 and float64 compute in
their own precision; float16 and bfloat16 storage compute in float32. math "tf32" runs the
same FP32 arithmetic.

Steps (alpha = m + 2, T = n * tiles_h * tiles_w, P the transform points alpha^2):
1. filter: U[xi, nu] = G g G^T, formed in float64 and rounded once to the compute dtype;
2. input: x copied into a zero-bordered buffer covering every tile, then V = B^T d B over
   the overlapping alpha x alpha tiles, separably (rows, then columns), each output a sum of
   whole strided slices times the matrix's small integer coefficients;
3. GEMM: M[xi, nu] = U[xi, nu] (k x c) @ V[xi, nu] (c x T), one matmul over the P points;
4. output: y = A^T M A, separably, into m x m tiles, cropped onto y.

Workspace (E: compute element size, Ht = tiles_h*m + 2, Wt = tiles_w*m + 2; each aligned):
    n*c*Ht*Wt*E (bordered input) + alpha*n*c*tiles_h*Wt*E (row-transformed input)
  + P*k*c*E (U) + P*c*T*E (V) + P*k*T*E (M) + m*alpha*k*T*E (row-transformed M)
  + n*k*tiles_h*m*tiles_w*m*E (tiled output) + max(n*c*tiles_h*Wt, alpha*k*T)*E (scratch)
Allocated per call outside it: the float64 filter transform (alpha^2*k*c*8 bytes, and
einsum's (alpha, k, c, 3) intermediate) before it is rounded into U; no other temporaries.
Configs: "f2x2" and "f4x4" (the output tile side).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from algorithms import winograd
from algorithms.base import Support, WorkspaceLayout
from algorithms.cpu._common import CpuAlgorithm, compute_dtype
from algorithms.cpu.gemm import matmul
from algorithms.problem import ConvProblem


def _layout(problem: ConvProblem, config: str) -> WorkspaceLayout:
    t = winograd.tiling(problem, config)
    n, c, k, a, m = problem.n, problem.c, problem.k, t.alpha, t.m
    tiles = t.tiles(n)
    wt = t.tiles_w * m + 2
    dtype = compute_dtype(problem)
    return (
        WorkspaceLayout()
        .add("xp", (n, c, t.tiles_h * m + 2, wt), dtype)
        .add("rows", (a, n, c, t.tiles_h, wt), dtype)
        .add("u", (a * a, k, c), dtype)
        .add("v", (a * a, c, tiles), dtype)
        .add("m", (a * a, k, tiles), dtype)
        .add("s", (m, a, k, tiles), dtype)
        .add("yt", (n, k, t.tiles_h, m, t.tiles_w, m), dtype)
        .add("scratch", (max(n * c * t.tiles_h * wt, a * k * tiles),), dtype)
    )


def _combine(out: np.ndarray, coeffs: np.ndarray, sources: list[np.ndarray],
             scratch: np.ndarray) -> None:
    """out = sum_j coeffs[j] * sources[j], skipping zero coefficients, without temporaries."""
    first = True
    tmp = scratch[: out.size].reshape(out.shape)
    for coeff, term in zip(coeffs, sources, strict=True):
        if coeff == 0:
            continue
        if first:
            np.multiply(term, coeff, out=out)
            first = False
        elif coeff == 1:
            np.add(out, term, out=out)
        elif coeff == -1:
            np.subtract(out, term, out=out)
        else:
            np.multiply(term, coeff, out=tmp)
            np.add(out, tmp, out=out)


def filter_transform(w: np.ndarray, transforms: winograd.Transforms) -> np.ndarray:
    """U = G g G^T in float64, shaped (alpha*alpha, k, c)."""
    g = transforms.array("g")
    u = np.einsum("xi,kcij,yj->xykc", g, np.asarray(w, np.float64), g, optimize=True)
    return u.reshape(transforms.alpha ** 2, w.shape[0], w.shape[1])


class WinogradConv(CpuAlgorithm):
    """Winograd F(m x m, 3 x 3): transforms plus one batched GEMM over the transform points."""

    name: ClassVar[str] = "winograd"

    def _limits(self, problem: ConvProblem) -> Support:
        """3x3, stride 1, dilation 1, groups 1 (algorithms.winograd.limits)."""
        return winograd.limits(problem)

    def configs(self, problem: ConvProblem) -> tuple[str, ...]:
        """F(2x2,3x3) and F(4x4,3x3)."""
        return winograd.CONFIGS

    def _workspace(self, problem: ConvProblem, config: str) -> int:
        """Bordered input, U, V, M and the transform stages (see the module docstring)."""
        return _layout(problem, config).nbytes

    def _run(
        self, x: np.ndarray, w: np.ndarray, y: np.ndarray, workspace: np.ndarray | None,
        problem: ConvProblem, config: str,
    ) -> None:
        """Filter and input transforms, the GEMM over transform points, output transform."""
        buf = _layout(problem, config).views(workspace)
        tr = winograd.TRANSFORMS[config]
        t = winograd.tiling(problem, config)
        n, c, k, a, m = problem.n, problem.c, problem.k, t.alpha, t.m
        th, tw = t.tiles_h, t.tiles_w
        (ph, pw), (out_h, out_w) = problem.pad, problem.out_hw
        scratch = buf["scratch"]

        np.copyto(buf["u"], filter_transform(w, tr), casting="unsafe")

        # The bordered input: padding and the overhang of the last tiles read zeros.
        xp = buf["xp"]
        xp.fill(0)
        # th*m >= out_h = h + 2*ph - 2, so the whole input lies inside the border.
        np.copyto(xp[:, :, ph:ph + problem.h, pw:pw + problem.w], x, casting="unsafe")
        # Coefficients in the compute dtype: a float64 scalar would make every float32 sum
        # run in float64 through conversion buffers.
        dtype = compute_dtype(problem).type
        bt = tr.array("bt", dtype)
        rows = buf["rows"]
        tile_rows = [xp[:, :, i:i + (th - 1) * m + 1:m, :] for i in range(a)]
        for xi in range(a):  # rows[xi] = sum_i B^T[xi, i] * (row i of every tile)
            _combine(rows[xi], bt[xi], tile_rows, scratch)
        v = buf["v"].reshape(a, a, c, n, th, tw)
        for xi in range(a):
            tile_cols = [rows[xi][..., j:j + (tw - 1) * m + 1:m] for j in range(a)]
            for nu in range(a):
                _combine(v[xi, nu].transpose(1, 0, 2, 3), bt[nu], tile_cols, scratch)

        matmul(buf["u"], buf["v"], out=buf["m"])

        at = tr.array("at", dtype)
        prod = buf["m"].reshape(a, a, k, -1)
        s = buf["s"]
        for i in range(m):  # s[i] = sum_xi A^T[i, xi] * M[xi]
            _combine(s[i], at[i], list(prod), scratch)
        yt = buf["yt"]
        for i in range(m):
            # s[i, nu] is (k, tiles) with tiles = (n, th, tw): as (n, k, th, tw) like y.
            points = [s[i, nu].reshape(k, n, th, tw).transpose(1, 0, 2, 3) for nu in range(a)]
            for j in range(m):
                _combine(yt[:, :, :, i, :, j], at[j], points, scratch)
        tiled = yt.reshape(n, k, th * m, tw * m)
        np.copyto(y, tiled[:, :, :out_h, :out_w], casting="unsafe")
