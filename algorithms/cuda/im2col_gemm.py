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
not im2col's gather). The merged configuration and backward_filter keep their image-inner
column matrix, which a pointwise layer needs as much as any other.
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

import functools
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from algorithms.base import SUPPORTED, Support, Work, WorkspaceLayout, unsupported
from algorithms.cuda._base import CudaAlgorithm
from algorithms.cuda._cublas import OP_N, OP_T, gemm_strided_batched
from algorithms.cuda._loader import (
    CTYPES,
    INT32_LIMIT,
    ceil_div,
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
#: The configuration with the whole batch in one GEMM (forward and backward_data; see the
#: module docstring).
MERGED = "chunk=all-merged"

_THREADS = 256


#: The kernel copying float32 values rounded to TF32 (math "tf32": w, backward_data's dy).
ROUND_TF32 = "round_tf32"


def name_expression(dtype: str, image_inner: bool = False, tf32: bool = False) -> str:
    """The im2col template instance for a dtype and column layout (image-inner: backward_filter);
    `tf32`: storing values rounded to TF32."""
    return f"im2col<{CTYPES[dtype]}, {str(image_inner).lower()}{', true' if tf32 else ''}>"


def images_inner_expression(dtype: str, tf32: bool = False) -> str:
    """The instance copying dy [img][k][pq] to [k][img][pq] (backward_filter)."""
    return f"images_inner<{CTYPES[dtype]}{', true' if tf32 else ''}>"


def col2im_expression(dtype: str, image_inner: bool = False) -> str:
    """The col2im template instance for a dtype and column layout (backward_data)."""
    return f"col2im<{CTYPES[dtype]}{', true' if image_inner else ''}>"


def round_expression(dtype: str) -> str:
    """The instance rounding a float32 sum to `dtype` storage (float16 backward_filter)."""
    return f"round_to_storage<{CTYPES[dtype]}>"


def shipped_kernels() -> tuple[str, ...]:
    """Every name expression this module can ask for."""
    return (*(name_expression(d, inner) for d in CTYPES for inner in (False, True)),
            *(col2im_expression(d, inner) for d in CTYPES for inner in (False, True)),
            *(images_inner_expression(d) for d in CTYPES), round_expression("float16"),
            *(name_expression("float32", inner, tf32=True) for inner in (False, True)),
            images_inner_expression("float32", tf32=True), ROUND_TF32)


def chunk_images(problem: ConvProblem, config: str) -> int:
    """Images per im2col + GEMM round under `config`."""
    chunk = None if config == MERGED else CHUNKS[config]
    return problem.n if chunk is None else min(chunk, problem.n)


def column_elements(problem: ConvProblem, images: int) -> int:
    """Elements of the column matrix of `images` images."""
    out_h, out_w = problem.out_hw
    return images * problem.c * problem.r * problem.s * out_h * out_w


class Im2colGemmCuda(CudaAlgorithm):
    """Explicit column matrix in the workspace, then cuBLAS."""

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
        whole = _layout(problem, "chunk=all").nbytes
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
        """The regions of `_layout` (see the module docstring)."""
        return _layout(problem, config).nbytes

    def work(self, problem: ConvProblem, config: str) -> Work:
        """Per chunk its kernels (column matrix, dyT, dy's rounded copy) and a GEMM; once the
        rounded w and float16's final rounding (cuBLAS's blocks are not known here)."""
        layout = _layout(problem, config)
        # "col" is there exactly when a pass writes or reads it: im2col, col2im, or a
        # pointwise layer's rounded copy of x.
        per_chunk = (1 + ("col" in layout) + ("dyt" in layout) + ("dy" in layout)
                     + ("yt" in layout))
        once = ("w" in layout) + ("sum" in layout)
        return Work(launches=per_chunk * ceil_div(problem.n, chunk_images(problem, config))
                    + once)

    def _run(
        self, x: Any, w: Any, y: Any, workspace: Any, problem: ConvProblem, config: str
    ) -> None:
        """Enqueue the direction's column kernels and GEMMs, chunk by chunk."""
        # The column matrix is stored element by element: the workspace must be aligned to
        # the element (CuPy allocations are 256-byte aligned; a sliced uint8 one may not be),
        # and to 4 bytes where it also holds float16 backward_filter's float32 sum.
        layout = _layout(problem, config)
        if layout.nbytes:  # a pointwise layer's image-outer passes may need none
            require_aligned("im2col_gemm: workspace", workspace,
                            4 if "sum" in layout else problem.itemsize)
        chunk = chunk_images(problem, config)
        dw_sum = layout.view(workspace, "sum") if "sum" in layout else y
        if "w" in layout:  # math "tf32": cuBLAS reads a copy of w rounded to TF32
            w_tf32 = layout.view(workspace, "w")
            _round_tf32(w, w_tf32, 0, int(np.prod(problem.filter_shape)))
            w = w_tf32
        if config == MERGED and problem.direction == "forward":
            _im2col(x, workspace, problem, 0, problem.n, image_inner=True)
            _forward_merged(workspace, w, layout.view(workspace, "yt"), y, problem)
            return
        if config == MERGED:  # backward_data
            _backward_data_merged(x, w, layout.view(workspace, "dyt"), workspace, y, problem)
            return
        # Views made once per run, not per chunk (each costs host time in a timed region).
        # "col", where the layout has it, is its first region: the workspace itself (a view
        # would cost host time on every run).
        col = workspace if "col" in layout else None
        dy_tf32 = layout.view(workspace, "dy") if "dy" in layout else None
        dyt = layout.view(workspace, "dyt") if "dyt" in layout else None
        image = problem.k * _dims(problem)[0]  # elements of one image's dy
        for n0 in range(0, problem.n, chunk):
            nb = min(chunk, problem.n - n0)
            if problem.direction == "backward_data":
                dy, first = x, n0
                if dy_tf32 is not None:  # the chunk's dy rounded to TF32, from its first image
                    _round_tf32(x, dy_tf32, n0 * image, nb * image)
                    dy, first = dy_tf32, 0
                _backward_data_chunk(dy, first, w, y, col, problem, n0, nb)
                continue
            if problem.direction == "backward_filter":
                _im2col(x, col, problem, n0, nb, image_inner=True)
                _backward_filter_chunk(w, col, dyt, dw_sum, problem, n0, nb)
            else:
                _forward_chunk(_columns(x, col, problem, n0, nb), w, y, problem, n0, nb)
        if dw_sum is not y:
            total = int(np.prod(problem.filter_shape))
            kernel = get_kernel(KERNEL_FILE, round_expression(problem.dtype))
            kernel((grid_stride_blocks(total, _THREADS),), (_THREADS,),
                   (dw_sum, y, np.int32(total)))


@functools.lru_cache(maxsize=512)
def _layout(problem: ConvProblem, config: str) -> WorkspaceLayout:
    """The workspace's regions, in order: "col", the chunk's column matrix; "dyt",
    backward_filter's dy chunk as [k][img][pq]; under math "tf32" "w" and backward_data's
    "dy" chunk, copies rounded to TF32; "sum", float16 backward_filter's float32 dW. Cached:
    `run` reads it inside timed regions."""
    chunk = chunk_images(problem, config)
    activations = chunk * problem.k * _dims(problem)[0]
    merged = config == MERGED
    layout = WorkspaceLayout()
    if _needs_columns(problem, merged):
        layout.add("col", (column_elements(problem, chunk),), problem.dtype)
    if problem.direction == "backward_filter":
        layout.add("dyt", (activations,), problem.dtype)
    elif _tf32(problem):
        layout.add("w", problem.filter_shape, np.float32)
        if problem.direction == "backward_data" and not merged:
            layout.add("dy", (activations,), np.float32)
    if merged:  # the GEMM's other side, image-inner: y it writes, or dy it reads (rounded)
        layout.add("yt" if problem.direction == "forward" else "dyt", (activations,),
                   problem.dtype)
    if problem.direction == "backward_filter" and problem.dtype == "float16":
        layout.add("sum", problem.filter_shape, np.float32)
    return layout


def _needs_columns(problem: ConvProblem, merged: bool) -> bool:
    """Whether the column matrix takes workspace: always but for a pointwise layer's image-
    outer passes (x is the forward GEMM's columns, dx backward_data's), whose forward
    under math "tf32" still copies x rounded."""
    if merged or problem.direction == "backward_filter" or not problem.pointwise:
        return True
    return problem.direction == "forward" and _tf32(problem)


def _columns(x: Any, col: Any, problem: ConvProblem, n0: int, nb: int) -> int:
    """The device address of the forward column matrix of images n0..n0+nb: written by
    im2col into `col`, or for a pointwise layer x's own images (rounded into `col` first
    under math "tf32")."""
    if not problem.pointwise:
        _im2col(x, col, problem, n0, nb)
        return int(col.data.ptr)
    if col is None:
        return int(x.data.ptr) + n0 * problem.c * _dims(problem)[0] * problem.itemsize
    image = problem.c * _dims(problem)[0]
    _round_tf32(x, col, n0 * image, nb * image)
    return int(col.data.ptr)


def _round_tf32(src: Any, dst: Any, start: int, total: int) -> None:
    # dst[:total] = src.flat[start:start + total] rounded to TF32.
    kernel = get_kernel(KERNEL_FILE, ROUND_TF32)
    kernel((grid_stride_blocks(total, _THREADS),), (_THREADS,),
           (src, dst, np.int32(start), np.int32(total)))


@dataclass(frozen=True)
class _Batch:
    """One strided-batched GEMM of a chunk: first-matrix offsets and strides, in elements.

    `col` is the column matrix, `filt` the filter (w or dw), `act` the activation (y or
    dy) counted from the chunk's first image.
    """

    col: int
    col_stride: int
    filt: int
    filt_stride: int
    act: int
    act_stride: int
    count: int


def _per_image(problem: ConvProblem, img: int) -> _Batch:
    """Image `img` of the chunk, batched over the groups."""
    pq, crs, kg = _dims(problem)
    return _Batch(img * problem.c * problem.r * problem.s * pq, crs * pq, 0, kg * crs,
                  img * problem.k * pq, kg * pq, problem.groups)


def _batches(problem: ConvProblem, nb: int) -> list[_Batch]:
    """One GEMM per group batched over the chunk's images or, when groups outnumber the
    images, one per image batched over the groups (fewer, larger cuBLAS calls)."""
    pq, crs, kg = _dims(problem)
    if problem.groups > nb:
        return [_per_image(problem, img) for img in range(nb)]
    rs = problem.r * problem.s
    return [_Batch(gi * crs * pq, problem.c * rs * pq, gi * kg * crs, 0,
                   gi * kg * pq, problem.k * pq, nb) for gi in range(problem.groups)]


def _dims(problem: ConvProblem) -> tuple[int, int, int]:
    """(P*Q, cg*R*S, kg): the GEMM sizes of one image and group."""
    out_h, out_w = problem.out_hw
    return (out_h * out_w, problem.c // problem.groups * problem.r * problem.s,
            problem.k // problem.groups)


def _im2col(x: Any, col: Any, problem: ConvProblem, n0: int, nb: int,
            image_inner: bool = False) -> None:
    out_h, out_w = problem.out_hw
    total = column_elements(problem, nb)
    kernel = get_kernel(KERNEL_FILE, name_expression(problem.dtype, image_inner, _tf32(problem)))
    divisors = fastdiv_args(out_h * out_w, out_w, problem.r * problem.s, problem.s)
    kernel((grid_stride_blocks(total, _THREADS),), (_THREADS,),
           (x, col, *shape_args(problem), np.int32(n0), np.int32(total), *divisors,
            np.int32(nb), *fastdiv_args(nb)))


def _tf32(problem: ConvProblem) -> bool:
    # Math "tf32" lets cuBLAS read float32 operands as TF32 (about 7.7e-4 relative error on
    # normal data if it truncates them, within the 1e-3 allowed: benchmarks/tf32_error.py).
    return problem.math == "tf32"


def _forward_chunk(col: int, w: Any, y: Any, problem: ConvProblem, n0: int, nb: int) -> None:
    # Row-major C = A @ B is column-major C^T = B^T @ A^T: cuBLAS sees
    # m = P*Q, n = kg, k = cg*R*S with the column matrix (at address `col`) first.
    pq, crs, kg = _dims(problem)
    item = problem.itemsize
    act = y.data.ptr + n0 * problem.k * pq * item
    for b in _batches(problem, nb):
        gemm_strided_batched(
            problem.dtype, OP_N, OP_N, pq, kg, crs,
            col + b.col * item, pq, b.col_stride,
            w.data.ptr + b.filt * item, crs, b.filt_stride,
            act + b.act * item, pq, b.act_stride, b.count, tf32=_tf32(problem),
        )


def _forward_merged(col: Any, w: Any, yt: Any, y: Any, problem: ConvProblem) -> None:
    # The whole batch as one GEMM per group, L = n*P*Q wide: with image-inner columns
    # (cg*R*S x L per group, row-major) yT[k][img][pq] (kg x L per group) = W col, column-
    # major yT^T = col^T W^T: m = L, n = kg, k = cg*R*S, batched over the groups. Then y
    # [img][k][pq] from yT: images_inner's copy with the roles of images and channels
    # swapped (its "K" is the batch, its "images" the channels).
    pq, crs, kg = _dims(problem)
    length = problem.n * pq
    gemm_strided_batched(
        problem.dtype, OP_N, OP_N, length, kg, crs,
        col.data.ptr, length, crs * length,
        w.data.ptr, crs, kg * crs,
        yt.data.ptr, length, kg * length, problem.groups, tf32=_tf32(problem),
    )
    _images_inner(yt, y, problem.dtype, problem.n, pq, problem.k)


def _backward_data_merged(dy: Any, w: Any, dyt: Any, col: Any, dx: Any,
                          problem: ConvProblem) -> None:
    # The whole batch as one GEMM per group: dyT[k][img][pq] (rounded to TF32 under math
    # "tf32") from dy, then image-inner col (cg*R*S x L per group, L = n*P*Q) = W^T dyT,
    # column-major col^T = dyT^T W: m = L, n = cg*R*S, k = kg, W transposed; then col2im
    # gathers dx from that layout.
    pq, crs, kg = _dims(problem)
    length = problem.n * pq
    _images_inner(dy, dyt, problem.dtype, problem.k, pq, problem.n, tf32=_tf32(problem))
    gemm_strided_batched(
        problem.dtype, OP_N, OP_T, length, crs, kg,
        dyt.data.ptr, length, kg * length,
        w.data.ptr, crs, kg * crs,
        col.data.ptr, length, crs * length, problem.groups, tf32=_tf32(problem),
    )
    _col2im(col, dx, problem, 0, problem.n, image_inner=True)


def _images_inner(src: Any, dst: Any, dtype: str, rows: int, pq: int, count: int,
                  first: int = 0, tf32: bool = False) -> None:
    """dst[r][i][pq] = src[first + i][r][pq] for r < rows, i < count: one launch of
    images_inner (dy to [k][img][pq] with rows = K; yT back to y with rows = the batch)."""
    total = count * rows * pq
    kernel = get_kernel(KERNEL_FILE, images_inner_expression(dtype, tf32))
    kernel((grid_stride_blocks(total, _THREADS),), (_THREADS,),
           (src, dst, np.int32(rows), np.int32(pq), np.int32(count), np.int32(first),
            np.int32(total), *fastdiv_args(pq, count)))


def _col2im(col: Any, dx: Any, problem: ConvProblem, n0: int, nb: int,
            image_inner: bool = False) -> None:
    total = nb * problem.c * problem.h * problem.w
    kernel = get_kernel(KERNEL_FILE, col2im_expression(problem.dtype, image_inner))
    kernel((grid_stride_blocks(total, _THREADS),), (_THREADS,),
           (col, dx, *shape_args(problem), np.int32(n0), np.int32(total),
            *fastdiv_args(problem.h * problem.w, problem.w), np.int32(nb),
            *fastdiv_args(problem.c)))


def _backward_data_chunk(dy: Any, first: int, w: Any, dx: Any, col: Any, problem: ConvProblem,
                         n0: int, nb: int) -> None:
    # col (cg*R*S x P*Q, row-major) = W^T dy; column-major that is col^T = dy^T W:
    # m = P*Q, n = cg*R*S, k = kg, dy untransposed and W (kg x cg*R*S row-major) transposed.
    # The chunk's images n0.. start at image `first` of `dy` (0 in a rounded copy). A
    # pointwise layer (`col` None) has dx's images as its column matrices: no col2im.
    pq, crs, kg = _dims(problem)
    item = problem.itemsize
    act = dy.data.ptr + first * problem.k * pq * item
    out = (dx.data.ptr + n0 * problem.c * pq * item) if col is None else col.data.ptr
    for b in _batches(problem, nb):
        gemm_strided_batched(
            problem.dtype, OP_N, OP_T, pq, crs, kg,
            act + b.act * item, pq, b.act_stride,
            w.data.ptr + b.filt * item, crs, b.filt_stride,
            out + b.col * item, pq, b.col_stride, b.count, tf32=_tf32(problem),
        )
    if col is not None:
        _col2im(col, dx, problem, n0, nb)


def _backward_filter_chunk(dy: Any, col: Any, dyt: Any, dw: Any, problem: ConvProblem,
                           n0: int, nb: int) -> None:
    # dW (kg x cg*R*S, row-major) += dy col^T summed over the chunk's images; column-major
    # dW^T = col dy^T: m = cg*R*S, n = kg, k = L = nb*P*Q. Per group, the image-inner column
    # matrix is (cg*R*S) x L row-major (an L x cg*R*S column-major A, lda = L, transposed)
    # and dyT is kg x L row-major (an L x kg column-major B, ldb = L); the batch runs over the
    # groups. Chunks add into dW (beta = 1 after the first); `dw` is the float32 sum for
    # float16 (the layout's "sum").
    pq, crs, kg = _dims(problem)
    length = nb * pq
    float32_c = problem.dtype == "float16"
    # A kernel rather than cupy.copyto into a workspace view: both allocate nothing (graph
    # capture), but the kernel needs no CuPy array for dy and the CPU emulation runs it
    # under AddressSanitizer.
    _images_inner(dy, dyt, problem.dtype, problem.k, pq, nb, n0, _tf32(problem))
    gemm_strided_batched(
        problem.dtype, OP_T, OP_N, crs, kg, length,
        col.data.ptr, length, crs * length,
        dyt.data.ptr, length, kg * length,
        dw.data.ptr, crs, kg * crs, problem.groups,
        accumulate=n0 > 0, float32_c=float32_c, tf32=_tf32(problem),
    )
