"""Launchers of kernels/rearrange.cu's copies: `remap`, `phase_filter` and `phase_shuffle`
(the backward directions' rearranged operands, algorithms/by_forward.py and phases.py) and
`transpose` (the tensor-core kernels' NHWC operands, `nhwc_copies`).

Both copy bits through an unsigned type of the element's size, so every float format comes
through exactly, except where a float32 transpose is asked to round to TF32 or split into
float16 parts (wgmma's operands, `PARTS`); both enqueue on the current stream and allocate
nothing. Every tensor they touch is below 2**31 elements (the callers' `_limits` check it).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from math import prod
from typing import Any

import numpy as np

from algorithms.base import WorkspaceLayout
from algorithms.by_forward import Remap
from algorithms.cuda._launch import POINTER, Address, KernelLaunch, enqueue
from algorithms.cuda._loader import ceil_div, fastdiv_args, get_kernel, grid_stride_blocks
from algorithms.phases import Phases
from algorithms.problem import ConvProblem

KERNEL_FILE = "rearrange.cu"

_THREADS = 256

#: Element size in bytes -> the unsigned type the copy kernels move (bits, not values).
_BITS_TYPES: dict[int, str] = {2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}


#: What a float32 transpose writes: 0 copies bits, 1 rounds to TF32, 2 also writes each
#: value's TF32 remainder after the whole rounded batch (3xTF32's big and small parts), 3
#: the value times its tensor's power-of-two scale and its remainder, as float16 (3xFP16's
#: parts; kernels/rearrange.cu).
PARTS = (0, 1, 2, 3)
#: The copies each of PARTS writes of an operand, and their element type (None: the
#: problem's).
PART_COPIES: dict[int, tuple[int, str | None]] = {0: (1, None), 1: (1, None), 2: (2, None),
                                                  3: (2, "float16")}
#: 3xFP16 (PARTS 3): absmax_parts' blocks per operand (rearrange.cu's SCALE_BLOCKS), and the
#: float16 elements after an operand's two copies that hold its scale and their maxima.
SCALE_BLOCKS = 64
SCALE_TAIL = 2 * (1 + SCALE_BLOCKS)


#: The copies that move bits of one element size, whatever the float format.
_BIT_COPIES = ("remap", "phase_filter", "phase_shuffle")


def name_expression(kernel: str, itemsize: int, parts: int = 0, strided: bool = False) -> str:
    """The template instance of `kernel` (a bit copy, "transpose" or "pad_channels") for an
    element size (and the TF32 parts of the last two, and whether a transpose gathers a
    strided 1x1 filter's pixels)."""
    if kernel in _BIT_COPIES:
        return f"{kernel}<{_BITS_TYPES[itemsize]}>"
    value = "float" if parts else _BITS_TYPES[itemsize]
    if kernel == "pad_channels":
        return f"pad_channels<{value}, {parts}>"
    return f"transpose<{value}, {parts}{', true' if strided else ''}>"


def shipped_kernels() -> tuple[str, ...]:
    """Every name expression this module can ask for."""
    return (*(name_expression(kernel, size) for kernel in (*_BIT_COPIES, "transpose")
              for size in _BITS_TYPES),
            *(name_expression("transpose", 4, parts) for parts in PARTS if parts),
            # The tensor-core kernels' element sizes (16-bit and 32-bit bits).
            *(name_expression("transpose", size, 0, strided=True) for size in (2, 4)),
            *(name_expression("transpose", 4, parts, strided=True) for parts in PARTS if parts),
            # wgmma's padded copies: 16-bit bits, and float32 in every TF32 part (3xFP16 is
            # not offered where channels are padded).
            name_expression("pad_channels", 2),
            *(name_expression("pad_channels", 4, parts) for parts in PARTS if parts < 3),
            "absmax_parts")


def _copy(name: str, grid: tuple[int], args: tuple[Any, ...]) -> KernelLaunch:
    """One grid-stride copy launch: (src, dst) then `args`."""
    return KernelLaunch(KERNEL_FILE, name, grid, (_THREADS,), (POINTER, POINTER, *args))


def remap(src: Any, dst: Any, remap: Remap, itemsize: int) -> None:
    """One launch of the remap kernel over dst."""
    enqueue(_remap_launch(remap, itemsize), get_kernel, src, dst)


def phase_filter(w: Any, dst: Any, found: Phases, problem: ConvProblem) -> None:
    """One launch: dst = the phases' flipped sub-filters of w (algorithms/phases.py)."""
    enqueue(_phase_filter_launch(found, problem), get_kernel, w, dst)


def phase_shuffle(z: Any, dx: Any, found: Phases, problem: ConvProblem) -> None:
    """One launch: dx = the phases' outputs z interleaved (0 where no phase has a tap)."""
    enqueue(_phase_shuffle_launch(found, problem), get_kernel, z, dx)


# Worked out once per copy: a backward run of the rearranging algorithms makes two or three
# of them, each with about fifteen scalar arguments.
@functools.lru_cache(maxsize=4096)
def _remap_launch(remap: Remap, itemsize: int) -> KernelLaunch:
    total = prod(remap.dst_shape)
    (sh, sw), (dh, dw) = remap.src_hw, remap.dst_hw
    return _copy(name_expression("remap", itemsize), (grid_stride_blocks(total, _THREADS),),
            (*(np.int32(v) for v in (
                remap.a, remap.middle, remap.b, sh, sw, dh, dw, remap.offset[0],
                remap.offset[1], remap.step[0], remap.step[1], remap.flip, total)),
             *fastdiv_args(dw, dh, remap.a, remap.middle, remap.b)))


@functools.lru_cache(maxsize=4096)
def _phase_filter_launch(found: Phases, problem: ConvProblem) -> KernelLaunch:
    total = prod(found.filter_shape)
    return _copy(name_expression("phase_filter", problem.itemsize),
            (grid_stride_blocks(total, _THREADS),),
            tuple(np.int32(v) for v in (
                found.kg, found.cg, problem.r, problem.s, found.h.stride, found.w.stride,
                found.h.active, found.w.active, found.h.sub_taps, found.w.sub_taps, total)))


@functools.lru_cache(maxsize=4096)
def _phase_shuffle_launch(found: Phases, problem: ConvProblem) -> KernelLaunch:
    total = prod(problem.operand_shapes[2])
    return _copy(name_expression("phase_shuffle", problem.itemsize),
            (grid_stride_blocks(total, _THREADS),),
            tuple(np.int32(v) for v in (
                found.groups, found.cg, problem.h, problem.w, found.h.stride, found.w.stride,
                found.h.pad, found.w.pad, found.h.active, found.w.active, found.h.first,
                found.w.first, found.h.count, found.w.count, total)))


def _transpose_launch(batch: int, rows: int, cols: int, itemsize: int, parts: int,
                      pixels: ConvProblem | None = None) -> KernelLaunch:
    """(instance, grid, scalar arguments) of one transpose launch: dst[b][j][i] =
    src[b][i][j] for a (batch, rows, cols) source (rounded or split in `parts`, see PARTS);
    with `pixels`, a strided 1x1 problem whose x this is, column j of a source
    row is the pixel its output pixel j reads (cols = P*Q of its H*W)."""
    row_tiles, col_tiles = ceil_div(rows, 32), ceil_div(cols, 32)
    tiles = batch * row_tiles * col_tiles
    if pixels is None:  # the strided arguments, unused
        gather: tuple[Any, ...] = (np.int32(cols), *fastdiv_args(1), *(np.int32(1),) * 3)
    else:
        p, q = pixels.out_hw
        # The step between output rows' input rows: with one output row it is never taken,
        # and stride_h * W may then pass 2**31 (np.int32 refused it; a review of index
        # overflow, 2026-11-30).
        row_step = pixels.stride[0] * pixels.w if p > 1 else 0
        gather = (np.int32(pixels.h * pixels.w), *fastdiv_args(q), np.int32(q),
                  np.int32(row_step), np.int32(pixels.stride[1]))
    # One block per tile (grid_stride_blocks' cap), each looping over the rest.
    return _copy(name_expression("transpose", itemsize, parts, pixels is not None),
                 (grid_stride_blocks(tiles, threads=1),),
                 (*(np.int32(v) for v in (rows, cols, row_tiles, col_tiles, tiles)),
                  *fastdiv_args(row_tiles * col_tiles, col_tiles), *gather))


def plain_copy(rows: int, cols: int, itemsize: int) -> KernelLaunch:
    """The launch that copies a (rows, cols) array's bits as they are: the transpose of
    (rows, cols, 1)."""
    return _transpose_launch(rows, cols, 1, itemsize, 0)


def filter_transpose(problem: ConvProblem, parts: int) -> KernelLaunch:
    """The launch that copies w (K, C/groups, R, S) to (K, R*S, C/groups), the NHWC filter
    whose taps each hold C/groups contiguous channels, in `parts` (PARTS: 1 rounded to TF32,
    2 also the TF32 remainders after all of it)."""
    return _transpose_launch(problem.k, problem.c // problem.groups, problem.r * problem.s,
                             problem.itemsize, parts)


def enqueue_copy(launch: KernelLaunch, src: Any, dst: Any) -> None:
    """Enqueue one of this module's copy launches from src to dst."""
    enqueue(launch, get_kernel, src, dst)


def _pad_launch(batch: int, channels: int, padded: int, cols: int, itemsize: int,
                parts: int) -> KernelLaunch:
    """One pad_channels launch: (batch, channels, cols) -> (batch, cols, padded)."""
    total = batch * cols * padded
    return _copy(name_expression("pad_channels", itemsize, parts),
                 (grid_stride_blocks(total, _THREADS),),
                 (*(np.int32(v) for v in (channels, padded, cols, total)),
                  *fastdiv_args(padded, cols)))


#: Bytes per copy of the NHWC GEMM kernels: channels come in whole 16-byte vectors.
VECTOR_BYTES = 16


def nhwc_channels(problem: ConvProblem) -> int:
    """The channels per group an NHWC copy holds: C/groups, or with one group and C not a
    whole number of 16-byte vectors (a network's first layer, C = 3), C rounded up to one
    (`padded`: the extra channels are zeros in both copies, so they add nothing). The
    vectors of the problem's own dtype: a copy in float16 parts needs C/groups whole
    vectors of its own (callers check)."""
    cg, vector = problem.c // problem.groups, VECTOR_BYTES // problem.itemsize
    return -(-cg // vector) * vector if problem.groups == 1 else cg


def padded(problem: ConvProblem) -> bool:
    """Whether the NHWC copies pad the channels (`nhwc_channels`)."""
    return nhwc_channels(problem) != problem.c // problem.groups


@functools.lru_cache(maxsize=4096)
def nhwc_problem(problem: ConvProblem) -> ConvProblem:
    """The problem the NHWC GEMM runs over the copies: `gathered`, or with padded channels
    the layer with C = nhwc_channels (the padding's zeros add nothing to y)."""
    if padded(problem):
        return ConvProblem.from_key({**problem.key(), "c": nhwc_channels(problem)})
    return gathered(problem)


@functools.lru_cache(maxsize=4096)
def gathered(problem: ConvProblem) -> ConvProblem:
    """The problem an NHWC GEMM runs: `problem` itself, or for a 1x1 filter at a stride
    without padding, the stride-1 layer over the pixels it reads (H, W = P, Q), which the
    copy of x gathers (`nhwc_copies`). Why: the copy of x is then a quarter of x at stride
    2, not all of it: ResNet-50's res3.proj in strict FP32 (wgmma's two parts) wrote 206 MB
    of NHWC copies to read 51 MB of them (H100, 2026-11-27: 232 us, cuDNN 176)."""
    if (problem.r, problem.s) != (1, 1) or problem.pad != (0, 0) or problem.stride == (1, 1):
        return problem
    out_h, out_w = problem.out_hw
    return ConvProblem.from_key({**problem.key(), "h": out_h, "w": out_w, "stride_h": 1,
                                 "stride_w": 1, "dilation_h": 1, "dilation_w": 1})


def add_nhwc_operands(layout: WorkspaceLayout, problem: ConvProblem,
                      parts: int = 0) -> WorkspaceLayout:
    """Reserve the NHWC copies of x (N, H, W, C; H, W and C of `nhwc_problem`) and w (K,
    R*S, C/groups) in `layout`: the copies of each that `parts` writes, one after the other
    (PART_COPIES: 3xTF32's big and small parts, 3xFP16's in float16, each then followed by
    its SCALE_TAIL)."""
    copies, dtype = PART_COPIES[parts]
    problem = nhwc_problem(problem)
    dtype = dtype or problem.dtype
    x_shape: tuple[int, ...] = (copies * problem.n, problem.h, problem.w, problem.c)
    w_shape: tuple[int, ...] = (copies * problem.k, problem.r * problem.s,
                                problem.c // problem.groups)
    if parts == 3:  # flat: the tail is no whole row
        x_shape, w_shape = (prod(x_shape) + SCALE_TAIL,), (prod(w_shape) + SCALE_TAIL,)
    layout.add("x", x_shape, dtype)
    return layout.add("w", w_shape, dtype)


@dataclass(frozen=True)
class NhwcCopies:
    """The two transposes that write the NHWC operands, worked out once per problem: where
    in the workspace each copy goes (bytes of add_nhwc_operands' layout) and each launch;
    for 3xFP16 also the launch of the operands' partial maxima before them, and where their
    tails are (bytes)."""

    x_bytes: slice
    w_bytes: slice
    x_launch: KernelLaunch
    w_launch: KernelLaunch
    scale: KernelLaunch | None = None
    tails: tuple[int, int] = (0, 0)

    def enqueue(self, x: Any, w: Any, workspace: Any) -> tuple[Any, Any]:
        """Enqueue the copies (the maxima first, where scaled); (x, w) as copied: the
        Addresses of byte ranges of the workspace, which the kernels take as plain pointers
        (views would cost host time on every run)."""
        base = workspace.data.ptr
        xs, ws = Address(base + self.x_bytes.start), Address(base + self.w_bytes.start)
        if self.scale is not None:
            enqueue(self.scale, get_kernel, x, Address(base + self.tails[0]), w,
                    Address(base + self.tails[1]))
        enqueue(self.x_launch, get_kernel, x, xs)
        enqueue(self.w_launch, get_kernel, w, ws)
        return xs, ws


@functools.lru_cache(maxsize=4096)  # asked on every NHWC run
def nhwc_copies(problem: ConvProblem, parts: int = 0) -> NhwcCopies:
    """The copies of x and w into add_nhwc_operands' regions (first in the workspace), with
    the copies of each that `parts` writes (PARTS); x's of `gathered`'s pixels only, or both
    with their channels padded (`padded`; not at parts 3)."""
    ranges = add_nhwc_operands(WorkspaceLayout(), problem, parts).byte_ranges()
    item = problem.itemsize
    if padded(problem):  # one group (nhwc_channels)
        channels = nhwc_channels(problem)
        return NhwcCopies(
            ranges["x"], ranges["w"],
            _pad_launch(problem.n, problem.c, channels, problem.h * problem.w, item, parts),
            _pad_launch(problem.k, problem.c, channels, problem.r * problem.s, item, parts))
    run = gathered(problem)
    pixels = None if run == problem else problem  # not `is`: the cache hands back an equal one
    x_launch = _transpose_launch(problem.n, problem.c, run.h * run.w, item, parts, pixels)
    w_launch = filter_transpose(problem, parts)
    if parts != 3:
        return NhwcCopies(ranges["x"], ranges["w"], x_launch, w_launch)
    # 3xFP16: each tail right after its operand's two float16 copies.
    tails = (ranges["x"].start + 2 * 2 * prod(run.input_shape),
             ranges["w"].start + 2 * 2 * prod(problem.filter_shape))
    nx, nw = prod(problem.input_shape), prod(problem.filter_shape)
    scale = KernelLaunch(KERNEL_FILE, "absmax_parts", (2 * SCALE_BLOCKS,), (_THREADS,),
                         (POINTER, POINTER, np.int32(nx), POINTER, POINTER, np.int32(nw)))
    return NhwcCopies(ranges["x"], ranges["w"], x_launch, w_launch, scale, tails)
