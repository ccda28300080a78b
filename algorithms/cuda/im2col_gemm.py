"""GPU im2col + cuBLAS GEMM (kernels/im2col.cu, then strided-batched GEMM), every direction.

For each chunk of images the im2col kernel writes the column matrix into the workspace,
laid out [image][channel][r][s][p][q] (forward and backward_data), so that for every image and
group the (cg*R*S) x (P*Q) block is one row-major matrix; cuBLAS then computes y[img, group] =
W[group] @ col[img, group] straight into y, as one strided-batched call per group (batch over
the chunk's images, filter stride 0) or, when groups outnumber the chunk's images, one call
per image (batch over groups). Chunks run one after another on the stream and reuse the same
workspace.

backward_data: col[img, group] = W[group]^T @ dy[img, group] by cuBLAS into the same column
layout, then the col2im kernel, where each dx element gathers its column entries (no atomics).
backward_filter: dW[group] = sum over the chunk's images of dy[img, group] @ col[img, group]^T,
as ONE cuBLAS call per chunk (batched over groups) whose reduction runs over (img, p, q). For
that the reduction index needs one stride in both operands, so im2col writes this direction's
column matrix image-inner, [channel][r][s][image][p][q] (per group a (cg*R*S) x (chunk*P*Q)
row-major matrix), and a copy kernel writes the chunk's dy as dyT[k][image][p][q] (per group
kg x (chunk*P*Q)). One call per image instead (k = P*Q each) was 32 serial small GEMMs per
ResNet-50 layer at batch 32, about 0.65 ms however small the layer. Chunks add into dW (beta
= 1 after the first), in its own dtype for float32 and float64; for float16 in a float32
workspace, rounded to float16 once at the end.

Supports float16 (cuBLAS with float32 compute), float32 (TF32 tensor cores under math
"tf32") and float64; any stride, padding, dilation and groups. A chunk's column matrix must
have fewer than 2**31 elements.

Workspace: align(chunk * C * R * S * P * Q * itemsize), the column matrix, chunk = images per
GEMM round (every direction); for backward_filter then align(chunk * K * P * Q * itemsize),
dyT; under math "tf32" (forward, backward_data) align(K * C/groups * R * S * 4), w rounded
to TF32, and for backward_data align(chunk * K * P * Q * 4), the chunk's dy rounded; for
float16 backward_filter align(K * C/groups * R * S * 4), the float32 sum.
It must be aligned to the element size, and to 4 bytes for the float32 sum (run() checks).
Pointwise layers (1x1, stride 1, no padding; `ConvProblem.pointwise`) have no column matrix
in the image-outer directions: an image is its own, so the forward GEMM reads x and the
backward_data GEMM writes dx, with no im2col or col2im pass and no "col" workspace. Under math
"tf32" the forward GEMM reads a chunk of x rounded to TF32 by round_tf32 (a contiguous copy,
not im2col's gather); the first chunk's copy and w's are one launch (round_tf32_pair), as
are backward_data's first dy chunk and w's. The merged configuration and backward_filter
keep their image-inner column matrix, which a pointwise layer needs as much as any other.
Configurations: "chunk=1", "chunk=4", "chunk=16", "chunk=all" (those with chunk >= n are
left out except "chunk=all"), and at n > 1 for forward and backward_data "chunk=all-merged":
the column matrix image-inner, as backward_filter writes it, and ONE GEMM per group over
the whole batch (N = n*P*Q instead of a batch of n GEMMs P*Q wide: 49 or 196 columns each
in ResNet-50's late 1x1 layers, too narrow for cuBLAS's tiles). Forward: the GEMM writes
yT[k][img][pq] into the workspace, copied into y after. backward_data: dy is first copied
to dyT[k][img][pq] (rounded to TF32 under math "tf32"), and col2im reads the image-inner
columns. Either takes align(n * K * P * Q * itemsize) more workspace.
"""

from __future__ import annotations

from typing import Any, ClassVar

from algorithms.base import SUPPORTED, Support, Work, unsupported
from algorithms.cuda._base import CudaAlgorithm
from algorithms.cuda._im2col_program import (
    CHUNKS,
    KERNEL_FILE,
    MERGED,
    ROUND_TF32,
    chunk_images,
    column_elements,
    images_inner_expression,
    name_expression,
    program,
    shipped_kernels,
    workspace_alignment,
    workspace_layout,
)
from algorithms.cuda._loader import INT32_LIMIT, get_kernel, require_aligned, tensors_fit_int32
from algorithms.problem import ConvProblem

# Named here too: tests, the emulator and the loader's list of shipped kernels read them
# from the algorithm's module.
__all__ = ["KERNEL_FILE", "MERGED", "ROUND_TF32", "Im2colGemmCuda", "images_inner_expression",
           "name_expression", "shipped_kernels"]


class Im2colGemmCuda(CudaAlgorithm):
    """Explicit column matrix in the workspace, then cuBLAS."""

    replayable: ClassVar[bool] = True  # every GPU call through _launch or _cublas

    name: ClassVar[str] = "im2col_gemm"
    directions: ClassVar[tuple[str, ...]] = ("forward", "backward_data", "backward_filter")

    def _limits(self, problem: ConvProblem) -> Support:
        """Every shape whose single-image column matrix fits 32-bit indexing."""
        if not tensors_fit_int32(problem, column_elements(problem, 1)):
            return unsupported("a tensor or one image's column matrix has 2**31+ elements")
        return SUPPORTED

    def configs(self, problem: ConvProblem) -> tuple[str, ...]:
        """Distinct chunk sizes whose column matrix fits 32-bit indexing; a chunk below the
        batch only where it saves workspace (a pointwise layer's image-outer passes need
        none outside math "tf32", and more GEMM calls would only cost time)."""
        out: list[str] = []
        whole = workspace_layout(problem, "chunk=all").nbytes
        for name, chunk in CHUNKS.items():
            if chunk is not None and (chunk >= problem.n or not whole):
                continue
            if column_elements(problem, chunk_images(problem, name)) <= INT32_LIMIT:
                out.append(name)
        # Merging one image's GEMM into the batch's pays for its copy of y (dy) when there
        # are images to merge.
        if (problem.direction != "backward_filter" and problem.n > 1
                and column_elements(problem, problem.n) <= INT32_LIMIT):
            out.append(MERGED)
        return tuple(out)

    def _workspace(self, problem: ConvProblem, config: str) -> int:
        """The regions of `_im2col_program.workspace_layout` (see the module docstring)."""
        return workspace_layout(problem, config).nbytes

    def work(self, problem: ConvProblem, config: str) -> Work:
        """Its program's launches: per chunk the column kernels and one GEMM per group (or
        per image); once the rounded w and float16's final rounding (cuBLAS's blocks are
        not known here)."""
        return Work(launches=len(program(problem, config).steps))

    def _run(
        self, x: Any, w: Any, y: Any, workspace: Any, problem: ConvProblem, config: str
    ) -> None:
        """Enqueue the column kernels and GEMMs of `_im2col_program.program`, in order."""
        # The column matrix is stored element by element: the workspace must be aligned to
        # the element (CuPy allocations are 256-byte aligned; a sliced uint8 one may not be),
        # and to 4 bytes where it also holds float16 backward_filter's float32 sum.
        alignment = workspace_alignment(problem, config)
        if alignment:  # a pointwise layer's image-outer passes may need no workspace
            require_aligned("im2col_gemm: workspace", workspace, alignment)
        program(problem, config).run(get_kernel, x, w, y, workspace)
