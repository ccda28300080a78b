"""GPU im2col + cuBLAS GEMM (kernels/im2col.cu, then strided-batched GEMM).

For each chunk of images the im2col kernel writes the column matrix into the workspace,
laid out [image][channel][r][s][p][q], so that for every image and group the (cg*R*S) x (P*Q)
block is one row-major matrix; cuBLAS then computes y[img, group] = W[group] @ col[img, group]
straight into y, as one strided-batched call per group (batch over the chunk's images, filter
stride 0) or, when groups outnumber the chunk's images, one call per image (batch over
groups). Chunks run one after another on the stream and reuse the same workspace.

Supports float16 (cuBLAS with float32 compute), float32 and float64; any stride, padding,
dilation and groups. A chunk's column matrix must have fewer than 2**31 elements.

Workspace: align(chunk * C * R * S * P * Q * itemsize), chunk = images per GEMM round; it must
be aligned to the element size (run() checks).
Configurations: "chunk=1", "chunk=4", "chunk=16", "chunk=all" (those with chunk >= n are
left out except "chunk=all").
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from algorithms.base import SUPPORTED, Support, align, unsupported
from algorithms.cuda._base import CudaAlgorithm
from algorithms.cuda._cublas import OP_N, gemm_strided_batched
from algorithms.cuda._loader import (
    CTYPES,
    INT32_LIMIT,
    fastdiv_args,
    get_kernel,
    grid_stride_blocks,
    require_aligned,
    shape_args,
    tensors_fit_int32,
)
from algorithms.problem import ConvProblem

KERNEL_FILE = "im2col.cu"

#: Chunk sizes in images; None is the whole batch.
CHUNKS: dict[str, int | None] = {"chunk=1": 1, "chunk=4": 4, "chunk=16": 16, "chunk=all": None}

_THREADS = 256


def name_expression(dtype: str) -> str:
    """The im2col template instance for a dtype."""
    return f"im2col<{CTYPES[dtype]}>"


def shipped_kernels() -> tuple[str, ...]:
    """Every name expression this module can ask for."""
    return tuple(name_expression(d) for d in CTYPES)


def chunk_images(problem: ConvProblem, config: str) -> int:
    """Images per im2col + GEMM round under `config`."""
    chunk = CHUNKS[config]
    return problem.n if chunk is None else min(chunk, problem.n)


def column_elements(problem: ConvProblem, images: int) -> int:
    """Elements of the column matrix of `images` images."""
    out_h, out_w = problem.out_hw
    return images * problem.c * problem.r * problem.s * out_h * out_w


class Im2colGemmCuda(CudaAlgorithm):
    """Explicit column matrix in the workspace, then cuBLAS."""

    name: ClassVar[str] = "im2col_gemm"

    def _limits(self, problem: ConvProblem) -> Support:
        """Every shape whose single-image column matrix fits 32-bit indexing."""
        if not tensors_fit_int32(problem, column_elements(problem, 1)):
            return unsupported("a tensor or one image's column matrix has 2**31+ elements")
        return SUPPORTED

    def configs(self, problem: ConvProblem) -> tuple[str, ...]:
        """Distinct chunk sizes whose column matrix fits 32-bit indexing."""
        out: list[str] = []
        for name, chunk in CHUNKS.items():
            if chunk is not None and chunk >= problem.n:
                continue
            if column_elements(problem, chunk_images(problem, name)) <= INT32_LIMIT:
                out.append(name)
        return tuple(out)

    def _workspace(self, problem: ConvProblem, config: str) -> int:
        """The column matrix of one chunk."""
        return align(column_elements(problem, chunk_images(problem, config)) * problem.itemsize)

    def _run(
        self, x: Any, w: Any, y: Any, workspace: Any, problem: ConvProblem, config: str
    ) -> None:
        """Enqueue im2col and the GEMMs, chunk by chunk."""
        # The column matrix is stored element by element: the workspace must be aligned to
        # the element (CuPy allocations are 256-byte aligned; a sliced uint8 one may not be).
        require_aligned("im2col_gemm: workspace", workspace, problem.itemsize)
        out_h, out_w = problem.out_hw
        pq, rs = out_h * out_w, problem.r * problem.s
        g, cg, kg = problem.groups, problem.c // problem.groups, problem.k // problem.groups
        crs, item = cg * rs, problem.itemsize
        kernel = get_kernel(KERNEL_FILE, name_expression(problem.dtype))
        divisors = fastdiv_args(pq, out_w, rs, problem.s)
        chunk = chunk_images(problem, config)
        col, wp, yp = workspace.data.ptr, w.data.ptr, y.data.ptr
        for n0 in range(0, problem.n, chunk):
            nb = min(chunk, problem.n - n0)
            total = column_elements(problem, nb)
            kernel(
                (grid_stride_blocks(total, _THREADS),), (_THREADS,),
                (x, workspace, *shape_args(problem), np.int32(n0), np.int32(total), *divisors),
            )
            # Row-major C = A @ B is column-major C^T = B^T @ A^T: cuBLAS sees
            # m = P*Q, n = kg, k = cg*R*S with the column matrix first.
            if g <= nb:
                for gi in range(g):
                    gemm_strided_batched(
                        problem.dtype, OP_N, OP_N, pq, kg, crs,
                        col + gi * crs * pq * item, pq, problem.c * rs * pq,
                        wp + gi * kg * crs * item, crs, 0,
                        yp + (n0 * problem.k + gi * kg) * pq * item, pq, problem.k * pq,
                        nb,
                    )
            else:
                for img in range(nb):
                    gemm_strided_batched(
                        problem.dtype, OP_N, OP_N, pq, kg, crs,
                        col + img * problem.c * rs * pq * item, pq, crs * pq,
                        wp, crs, kg * crs,
                        yp + (n0 + img) * problem.k * pq * item, pq, kg * pq,
                        g,
                    )
