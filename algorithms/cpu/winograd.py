"""Winograd F(2x2,3x3) and F(4x4,3x3) on the CPU: every transform a GEMM, one batched GEMM.

Forward only; 3x3 filters, stride 1, dilation 1, groups 1, any padding and size (see
algorithms/winograd.py for the matrices and the limits). float32 and float64 compute in
their own precision; float16 and bfloat16 storage compute in float32. math "tf32" runs the
same FP32 arithmetic.

NumPy runs a separable transform written as sums of strided slices (the first version of
this module) as hundreds of small passes: F(4x4) took 4.4 ms on n1 c64 56x56 -> k64, 2.5x
im2col_gemm. Here each transform is one GEMM with its small matrix over a gathered copy
whose inner runs are contiguous, so the copies and the GEMMs both stream (BENCHMARKS.md,
"Winograd on the CPU as GEMMs").

Steps (alpha = m + 2, P = alpha^2 transform points, the points ordered (xi, nu), xi along
the rows; n is the images of one pass, images_per_pass, and T = n * tiles_h * tiles_w):
1. filter: U (P, k, c) = (G kron G) (P x 9) @ g (9 x k*c), in the compute dtype, once;
then for each pass of images:
2. input: x copied into a zero-bordered buffer covering every tile, then columns first,
   B^T @ (every tile's columns, gathered as (j, c, n, rows, tiles_w)), then rows,
   B^T @ (every tile's rows, gathered as (i, nu, c, n, tiles_h, tiles_w)), which leaves
   V (P, c, T) in place;
3. GEMM: M[p] = U[p] (k x c) @ V[p] (c x T), one batched matmul over the P points;
4. output: rows, A^T @ M as (xi, nu*k*T), then columns, each row's (k*T, nu) @ A, which
   leaves every tile's m columns contiguous, so one copy with m*tiles_w-long runs lays the
   tiles onto y (through a tiled buffer when the last tiles overhang y).

Workspace (E: compute element size, Ht = tiles_h*m + 2, Wt = tiles_w*m + 2; each aligned;
two regions take turns, since each stage only reads the one before):
    n*c*Ht*Wt*E (bordered input) + P*k*c*E (U)
  + max(alpha*c*n*Ht*tiles_w, P*c*T, P*k*T, m*m*k*T)*E (column gather, row gather, M, tiles)
  + max(alpha*c*n*Ht*tiles_w, P*c*T, m*alpha*k*T)*E (column transform, V, row transform)
  + n*k*tiles_h*m*tiles_w*m*E (tiled output: used when the tiles overhang y or y is strided)
Configs: "f2x2" and "f4x4" (the output tile side).
"""

from __future__ import annotations

from functools import cache
from typing import Any, ClassVar

import numpy as np
from numpy.lib.stride_tricks import as_strided

from algorithms import winograd
from algorithms.base import Support, WorkspaceLayout
from algorithms.cpu._common import CpuAlgorithm, compute_dtype
from algorithms.cpu.gemm import matmul
from algorithms.problem import ConvProblem

#: Tiles a pass transforms, at least: the GEMMs' N dimension. Images go through in passes
#: of about this many tiles, so the workspace does not grow with the batch (at n8 on
#: ResNet-50's res2.3x3, 43 MB in one pass) while the GEMMs stay as wide as one image of
#: res2.3x3 gives; see BENCHMARKS.md, "Winograd on the CPU as GEMMs".
PASS_TILES = 256


def images_per_pass(problem: ConvProblem, t: winograd.Tiling) -> int:
    """How many images one pass transforms: at least PASS_TILES tiles, at most the batch."""
    return min(problem.n, -(-PASS_TILES // (t.tiles_h * t.tiles_w)))


def _sizes(problem: ConvProblem, t: winograd.Tiling, n: int) -> tuple[int, int]:
    """Elements of the two alternating regions for passes of `n` images (see the module
    docstring)."""
    c, k, a, m = problem.c, problem.k, t.alpha, t.m
    tiles = t.tiles(n)
    columns = a * c * n * (t.tiles_h * m + 2) * t.tiles_w
    return (max(columns, a * a * c * tiles, a * a * k * tiles, m * m * k * tiles),
            max(columns, a * a * c * tiles, m * a * k * tiles))


def _overhangs(problem: ConvProblem, t: winograd.Tiling) -> bool:
    """Whether the last row or column of tiles reaches past y."""
    return (t.tiles_h * t.m, t.tiles_w * t.m) != problem.out_hw


def _layout(problem: ConvProblem, config: str) -> WorkspaceLayout:
    t = winograd.tiling(problem, config)
    n, c, k, m = images_per_pass(problem, t), problem.c, problem.k, t.m
    dtype = compute_dtype(problem)
    first, second = _sizes(problem, t, n)
    layout = (
        WorkspaceLayout()
        .add("xp", (n, c, t.tiles_h * m + 2, t.tiles_w * m + 2), dtype)
        .add("u", (t.alpha ** 2, k, c), dtype)
        .add("first", (first,), dtype)
        .add("second", (second,), dtype)
    )
    # The tiled output is used only where the tiles overhang y or y is a strided view, but
    # the workspace cannot know y's strides, so it always holds one.
    return layout.add("yt", (n, k, t.tiles_h, m, t.tiles_w, m), dtype)


@cache
def _matrices(config: str, dtype: np.dtype[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """G kron G (P x 9), B^T and A^T of `config` in `dtype`."""
    tr = winograd.TRANSFORMS[config]
    g = tr.array("g")
    return (np.kron(g, g).astype(dtype), tr.array("bt", dtype.type),
            tr.array("at", dtype.type))


def _region(flat: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The first elements of a region as a C-contiguous array of `shape`."""
    return flat[: int(np.prod(shape))].reshape(shape)


def _zero_border(xp: np.ndarray, top: int, left: int, h: int, w: int) -> None:
    """Zero what lies outside xp[..., top:top+h, left:left+w] (the input goes there)."""
    xp[:, :, :top].fill(0)
    xp[:, :, top + h:].fill(0)
    xp[:, :, top:top + h, :left].fill(0)
    xp[:, :, top:top + h, left + w:].fill(0)


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
        """Bordered input, U and the two alternating regions (see the module docstring)."""
        return _layout(problem, config).nbytes

    def _run(
        self, x: np.ndarray, w: np.ndarray, y: np.ndarray, workspace: np.ndarray | None,
        problem: ConvProblem, config: str,
    ) -> None:
        """The filter transform, then each pass of images through the rest."""
        buf = _layout(problem, config).views(workspace)
        t = winograd.tiling(problem, config)
        k, c, a = problem.k, problem.c, t.alpha
        dtype = compute_dtype(problem)
        kron_g = _matrices(config, dtype)[0]
        matmul(kron_g, np.asarray(w, dtype).reshape(k * c, 9).T,
               out=buf["u"].reshape(a * a, k * c))
        # The bordered input: padding and the overhang of the last tiles read zeros. Each
        # pass writes only the inside, so the border is zeroed once.
        # th*m >= out_h = h + 2*ph - 2, so the whole input lies inside the border.
        _zero_border(buf["xp"], *problem.pad, problem.h, problem.w)
        step = images_per_pass(problem, t)
        for first in range(0, problem.n, step):
            _images(x[first:first + step], y[first:first + step], buf, problem, config)


def _images(x: np.ndarray, y: np.ndarray, buf: dict[str, np.ndarray], problem: ConvProblem,
            config: str) -> None:
    """Input transform, the GEMM over transform points and output transform of the images
    `x` (at most images_per_pass of them) into `y`, with U already in buf["u"]."""
    t = winograd.tiling(problem, config)
    n, c, k, a, m = x.shape[0], problem.c, problem.k, t.alpha, t.m
    th, tw, tiles = t.tiles_h, t.tiles_w, t.tiles(n)
    (ph, pw), (out_h, out_w) = problem.pad, problem.out_hw
    _, bt, at = _matrices(config, compute_dtype(problem))
    first, second = buf["first"], buf["second"]

    xp = buf["xp"][:n]
    np.copyto(xp[:, :, ph:ph + problem.h, pw:pw + problem.w], x, casting="unsafe")
    rows = xp.shape[2]
    s_n, s_c, s_h, s_w = xp.strides
    # cols[j, c, n, h, tile] = xp[n, c, h, tile*m + j]
    cols = _region(first, (a, c, n, rows, tw))
    np.copyto(cols, as_strided(xp, cols.shape, (s_w, s_c, s_n, s_h, m * s_w)))
    by_col = _region(second, (a, c, n, rows, tw))  # (nu, c, n, h, tile_w)
    matmul(bt, cols.reshape(a, -1), out=by_col.reshape(a, -1))
    # tile_rows[i, nu, c, n, tile_h, tile_w] = by_col[nu, c, n, tile_h*m + i, tile_w]
    tile_rows = _region(first, (a, a, c, n, th, tw))
    s_nu, s_c, s_n, s_h, s_w = by_col.strides
    np.copyto(tile_rows,
              as_strided(by_col, tile_rows.shape, (s_h, s_nu, s_c, s_n, m * s_h, s_w)))
    v = _region(second, (a * a, c, tiles))  # points (xi, nu)
    matmul(bt, tile_rows.reshape(a, -1), out=v.reshape(a, -1))

    prod = _region(first, (a * a, k, tiles))
    matmul(buf["u"], v, out=prod)

    by_row = _region(second, (m, a, k * tiles))  # (i, nu, k*T)
    matmul(at, prod.reshape(a, -1), out=by_row.reshape(m, -1))
    out_tiles = _region(first, (m, k * tiles, m))  # (i, (k, n, th, tw), j)
    matmul(by_row.transpose(0, 2, 1), at.T, out=out_tiles)

    # (i, k, n, th, tw*m) onto y viewed as (n, k, th, i, tw*m): runs of tw*m elements.
    laid = out_tiles.reshape(m, k, n, th, tw * m).transpose(2, 1, 3, 0, 4)
    if not _overhangs(problem, t) and y.flags.c_contiguous:
        np.copyto(y.reshape(n, k, th, m, tw * m), laid, casting="unsafe")
        return
    yt = buf["yt"][:n]
    np.copyto(yt.reshape(n, k, th, m, tw * m), laid)
    np.copyto(y, yt.reshape(n, k, th * m, tw * m)[:, :, :out_h, :out_w], casting="unsafe")
