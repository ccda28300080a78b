"""What an im2col_gemm run launches: the workspace's regions and, per direction and
configuration, the column kernels (kernels/im2col.cu) and cuBLAS GEMMs in order, worked out
once per (problem, configuration). The algorithm, its configurations and the layouts' reasons
are in algorithms/cuda/im2col_gemm.py's docstring."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from math import prod
from typing import Any

import numpy as np

from algorithms.base import WorkspaceLayout
from algorithms.cuda._cublas import OP_N, OP_T
from algorithms.cuda._loader import (
    CTYPES,
    fastdiv_args,
    grid_stride_blocks,
    shape_struct,
)
from algorithms.cuda._program import Gemm, Kernel, Program, Ref
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
#: The same over two ranges in one launch (w and the first chunk's operand).
ROUND_TF32_PAIR = "round_tf32_pair"


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
            images_inner_expression("float32", tf32=True), ROUND_TF32, ROUND_TF32_PAIR)


def chunk_images(problem: ConvProblem, config: str) -> int:
    """Images per im2col + GEMM round under `config`."""
    chunk = None if config == MERGED else CHUNKS[config]
    return problem.n if chunk is None else min(chunk, problem.n)


def column_elements(problem: ConvProblem, images: int) -> int:
    """Elements of the column matrix of `images` images."""
    out_h, out_w = problem.out_hw
    return images * problem.c * problem.r * problem.s * out_h * out_w



@functools.lru_cache(maxsize=512)
def workspace_layout(problem: ConvProblem, config: str) -> WorkspaceLayout:
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


@functools.lru_cache(maxsize=512)
def workspace_alignment(problem: ConvProblem, config: str) -> int:
    """The alignment in bytes `run` needs of the workspace: the element's, 4 where it holds
    the float32 sum; 0 when the layout has no region at all."""
    layout = workspace_layout(problem, config)
    if not layout.nbytes:
        return 0
    return 4 if "sum" in layout else problem.itemsize


def _needs_columns(problem: ConvProblem, merged: bool) -> bool:
    """Whether the column matrix takes workspace: always but for a pointwise layer's image-
    outer passes (x is the forward GEMM's columns, dx backward_data's), whose forward
    under math "tf32" still copies x rounded."""
    if merged or problem.direction == "backward_filter" or not problem.pointwise:
        return True
    return problem.direction == "forward" and _tf32(problem)


@functools.lru_cache(maxsize=512)
def program(problem: ConvProblem, config: str) -> Program:
    """Every launch and GEMM of a run, in order (see the module docstring): worked out once,
    so that a run binds its operands and enqueues. Operands: "a", "b", "out" (x, w, y;
    dy, w, dx; x, dy, dw) and the layout's regions."""
    layout = workspace_layout(problem, config)
    regions = tuple(layout.byte_ranges().items())
    steps: list[Kernel | Gemm] = []
    filt = "b"
    if "w" in layout:  # math "tf32": cuBLAS reads a copy of w rounded to TF32
        steps.append(_round_tf32("b", "w", 0, prod(problem.filter_shape)))
        filt = "w"
    if config == MERGED:
        steps += (_forward_merged if problem.direction == "forward"
                  else _backward_data_merged)(problem, filt)
        return Program(regions, tuple(_paired_rounds(steps)))
    chunk = chunk_images(problem, config)
    chunk_steps = {"forward": _forward_chunk, "backward_data": _backward_data_chunk,
                   "backward_filter": _backward_filter_chunk}[problem.direction]
    for n0 in range(0, problem.n, chunk):
        steps += chunk_steps(problem, layout, filt, n0, min(chunk, problem.n - n0))
    if "sum" in layout:  # float16 dW: the float32 sum rounded to storage once
        total = prod(problem.filter_shape)
        steps.append(_launch(round_expression(problem.dtype), total,
                             ("sum", "out", np.int32(total))))
    return Program(regions, tuple(_paired_rounds(steps)))


def _paired_rounds(steps: list[Kernel | Gemm]) -> list[Kernel | Gemm]:
    """`steps` with two leading TF32 roundings (w, then a pointwise layer's first chunk of x
    or backward_data's of dy) as one launch of round_tf32_pair, where 32-bit indices still
    cover both."""
    first, second = steps[:2] if len(steps) >= 2 else (None, None)
    if not (isinstance(first, Kernel) and isinstance(second, Kernel)
            and first.name == second.name == ROUND_TF32):
        return steps
    start1, total1 = first.scalars
    start2, total2 = second.scalars
    total = int(total1) + int(total2)
    if total >= 2**31:
        return steps
    pair = Kernel(KERNEL_FILE, ROUND_TF32_PAIR, (grid_stride_blocks(total, _THREADS),),
                  (_THREADS,), (*first.operands, *second.operands),
                  (start1, total1, start2, total2))
    return [pair, *steps[2:]]


def _launch(name: str, total: int, args: tuple[Any, ...]) -> Kernel:
    """A grid-stride launch of one of im2col.cu's kernels over `total` elements; `args`
    starts with its two operands (source, destination), then its scalars."""
    return Kernel(KERNEL_FILE, name, (grid_stride_blocks(total, _THREADS),), (_THREADS,),
                  args[:2], args[2:])


def _round_tf32(src: str, dst: str, start: int, total: int) -> Kernel:
    # dst[:total] = src.flat[start:start + total] rounded to TF32.
    return _launch(ROUND_TF32, total, (src, dst, np.int32(start), np.int32(total)))


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


def _im2col(problem: ConvProblem, n0: int, nb: int, image_inner: bool = False) -> Kernel:
    """The column matrix of images n0..n0+nb of "a" into "col"."""
    out_h, out_w = problem.out_hw
    total = column_elements(problem, nb)
    divisors = fastdiv_args(out_h * out_w, out_w, problem.r * problem.s, problem.s)
    return _launch(name_expression(problem.dtype, image_inner, _tf32(problem)), total,
                   ("a", "col", *shape_struct(problem), np.int32(n0), np.int32(total),
                    *divisors, np.int32(nb), *fastdiv_args(nb)))


def _tf32(problem: ConvProblem) -> bool:
    # Math "tf32" lets cuBLAS read float32 operands as TF32 (about 7.7e-4 relative error on
    # normal data if it truncates them, within the 1e-3 allowed: benchmarks/tf32_error.py).
    return problem.math == "tf32"


def _forward_chunk(problem: ConvProblem, layout: WorkspaceLayout, filt: str, n0: int,
                   nb: int) -> list[Kernel | Gemm]:
    # The column matrix: im2col's, or a pointwise layer's images of x themselves (rounded to
    # TF32 into "col" first under math "tf32"). Row-major C = A @ B is column-major C^T =
    # B^T @ A^T: cuBLAS sees m = P*Q, n = kg, k = cg*R*S with the column matrix first.
    pq, crs, kg = _dims(problem)
    item = problem.itemsize
    steps: list[Kernel | Gemm] = []
    image = problem.c * pq
    if not problem.pointwise:
        steps.append(_im2col(problem, n0, nb))
        col: Ref = ("col", 0)
    elif "col" in layout:
        steps.append(_round_tf32("a", "col", n0 * image, nb * image))
        col = ("col", 0)
    else:
        col = ("a", n0 * image * item)
    act = n0 * problem.k * pq * item
    steps += [Gemm(problem.dtype, OP_N, OP_N, pq, kg, crs,
                   (col[0], col[1] + b.col * item), pq, b.col_stride,
                   (filt, b.filt * item), crs, b.filt_stride,
                   ("out", act + b.act * item), pq, b.act_stride, b.count, tf32=_tf32(problem))
              for b in _batches(problem, nb)]
    return steps


def _forward_merged(problem: ConvProblem, filt: str) -> list[Kernel | Gemm]:
    # The whole batch as one GEMM per group, L = n*P*Q wide: with image-inner columns
    # (cg*R*S x L per group, row-major) yT[k][img][pq] (kg x L per group) = W col, column-
    # major yT^T = col^T W^T: m = L, n = kg, k = cg*R*S, batched over the groups. Then y
    # [img][k][pq] from yT: images_inner's copy with the roles of images and channels
    # swapped (its "K" is the batch, its "images" the channels).
    pq, crs, kg = _dims(problem)
    length = problem.n * pq
    return [_columns_image_inner(problem),
            Gemm(problem.dtype, OP_N, OP_N, length, kg, crs, ("col", 0), length, crs * length,
                 (filt, 0), crs, kg * crs, ("yt", 0), length, kg * length, problem.groups,
                 tf32=_tf32(problem)),
            _images_inner("yt", "out", problem.dtype, problem.n, pq, problem.k)]


def _backward_data_merged(problem: ConvProblem, filt: str) -> list[Kernel | Gemm]:
    # The whole batch as one GEMM per group: dyT[k][img][pq] (rounded to TF32 under math
    # "tf32") from dy, then image-inner col (cg*R*S x L per group, L = n*P*Q) = W^T dyT,
    # column-major col^T = dyT^T W: m = L, n = cg*R*S, k = kg, W transposed; then col2im
    # gathers dx from that layout.
    pq, crs, kg = _dims(problem)
    length = problem.n * pq
    return [_images_inner("a", "dyt", problem.dtype, problem.k, pq, problem.n,
                          tf32=_tf32(problem)),
            Gemm(problem.dtype, OP_N, OP_T, length, crs, kg, ("dyt", 0), length, kg * length,
                 (filt, 0), crs, kg * crs, ("col", 0), length, crs * length, problem.groups,
                 tf32=_tf32(problem)),
            _col2im(problem, 0, problem.n, image_inner=True) if not problem.pointwise
            # A pointwise layer's image-inner columns are dx with images and channels
            # swapped: images_inner's copy with their roles swapped, as for yT above.
            else _images_inner("col", "out", problem.dtype, problem.n, pq, problem.c)]


def _columns_image_inner(problem: ConvProblem) -> Kernel:
    """The whole batch's image-inner column matrix of "a" into "col": im2col's, or for a
    pointwise layer x with images and channels swapped, images_inner's copy (rounded to TF32
    under math "tf32"). Why: im2col decomposes each element by five divisions and checks its
    tap against the padding, where the copy divides twice: 26.7-28.0 SASS instructions per
    element against 19.3-22.0 (kernel_loop_sass.py --per-store, sm_90)."""
    if problem.pointwise:
        pq = _dims(problem)[0]
        return _images_inner("a", "col", problem.dtype, problem.c, pq, problem.n,
                             tf32=_tf32(problem))
    return _im2col(problem, 0, problem.n, image_inner=True)


def _images_inner(src: str, dst: str, dtype: str, rows: int, pq: int, count: int,
                  first: int = 0, tf32: bool = False) -> Kernel:
    """dst[r][i][pq] = src[first + i][r][pq] for r < rows, i < count: one launch of
    images_inner (dy to [k][img][pq] with rows = K; yT back to y with rows = the batch)."""
    total = count * rows * pq
    return _launch(images_inner_expression(dtype, tf32), total,
                   (src, dst, np.int32(rows), np.int32(pq), np.int32(count), np.int32(first),
                    np.int32(total), *fastdiv_args(pq, count)))


def _col2im(problem: ConvProblem, n0: int, nb: int, image_inner: bool = False) -> Kernel:
    """dx of images n0..n0+nb ("out") gathered from the column matrix ("col")."""
    total = nb * problem.c * problem.h * problem.w
    return _launch(col2im_expression(problem.dtype, image_inner), total,
                   ("col", "out", *shape_struct(problem), np.int32(n0), np.int32(total),
                    *fastdiv_args(problem.h * problem.w, problem.w), np.int32(nb),
                    *fastdiv_args(problem.c)))


def _backward_data_chunk(problem: ConvProblem, layout: WorkspaceLayout, filt: str, n0: int,
                         nb: int) -> list[Kernel | Gemm]:
    # col (cg*R*S x P*Q, row-major) = W^T dy; column-major that is col^T = dy^T W:
    # m = P*Q, n = cg*R*S, k = kg, dy untransposed and W (kg x cg*R*S row-major) transposed.
    # Under math "tf32" the chunk's dy is first rounded into "dy" (from its first image). A
    # pointwise layer (no "col") has dx's images as its column matrices: no col2im.
    pq, crs, kg = _dims(problem)
    item = problem.itemsize
    steps: list[Kernel | Gemm] = []
    image = problem.k * pq  # elements of one image's dy
    dy: Ref = ("a", n0 * image * item)
    if "dy" in layout:
        steps.append(_round_tf32("a", "dy", n0 * image, nb * image))
        dy = ("dy", 0)
    col: Ref = ("col", 0) if "col" in layout else ("out", n0 * problem.c * pq * item)
    steps += [Gemm(problem.dtype, OP_N, OP_T, pq, crs, kg,
                   (dy[0], dy[1] + b.act * item), pq, b.act_stride,
                   (filt, b.filt * item), crs, b.filt_stride,
                   (col[0], col[1] + b.col * item), pq, b.col_stride, b.count,
                   tf32=_tf32(problem))
              for b in _batches(problem, nb)]
    if "col" in layout:
        steps.append(_col2im(problem, n0, nb))
    return steps


def _backward_filter_chunk(problem: ConvProblem, layout: WorkspaceLayout, filt: str, n0: int,
                           nb: int) -> list[Kernel | Gemm]:
    # dW (kg x cg*R*S, row-major) += dy col^T summed over the chunk's images; column-major
    # dW^T = col dy^T: m = cg*R*S, n = kg, k = L = nb*P*Q. Per group, the image-inner column
    # matrix is (cg*R*S) x L row-major (an L x cg*R*S column-major A, lda = L, transposed)
    # and dyT is kg x L row-major (an L x kg column-major B, ldb = L); the batch runs over the
    # groups. Chunks add into dW (beta = 1 after the first): "out", or the float32 "sum" for
    # float16. dy is "b" here (`filt` is unused: this direction has no filter operand).
    # A kernel copies dy rather than cupy.copyto into a workspace view: both allocate
    # nothing (graph capture), but the kernel needs no CuPy array for dy and the CPU
    # emulation runs it under AddressSanitizer.
    pq, crs, kg = _dims(problem)
    length = nb * pq
    return [_im2col(problem, n0, nb, image_inner=True),
            _images_inner("b", "dyt", problem.dtype, problem.k, pq, nb, n0, _tf32(problem)),
            Gemm(problem.dtype, OP_T, OP_N, crs, kg, length, ("col", 0), length, crs * length,
                 ("dyt", 0), length, kg * length,
                 ("sum" if "sum" in layout else "out", 0), crs, kg * crs, problem.groups,
                 accumulate=n0 > 0, float32_c=problem.dtype == "float16",
                 tf32=_tf32(problem))]
