"""Host-side checks of the CUDA backend that need neither a GPU nor kernel execution.

The fast-division constants the kernels use, the FFT workspace layout, host refusal of
misaligned buffers, and launches on problems too big to run anywhere but a GPU: grid, block
and shared-memory limits, 32-bit scalar arguments, cuBLAS batch counts. The kernels themselves
run on the CPU in tests/test_cuda_emulated.py, and on a GPU in tests/gpu.
"""

from __future__ import annotations

import ctypes
import itertools
import shutil
from collections.abc import Callable
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from algorithms.base import AlgorithmBase
from algorithms.cuda import (
    KERNEL_MODULES,
    _cublas,
    _cublaslt,
    _fft_fused,
    _loader,
    _rearrange,
    _wgmma_configs,
    fft,
    im2col_gemm,
    implicit_gemm_wgmma,
)
from algorithms.cuda._im2col_program import ROUND_TF32_PAIR
from algorithms.cuda._loader import fastdiv
from algorithms.problem import ConvProblem
from benchmarks import cublas_call_cost
from tests.cuda_emu.cases import ALGORITHMS as ALGOS
from tests.cuda_emu.host import dev, dev_at
from tests.cuda_shapes import ALIGN_SHAPES, SHAPES

#: Facts the launch-only stand-ins record for the tests to check (cleared per test).
LAUNCHES: list[dict[str, Any]] = []


def fdiv(n: Any, mul: Any, shift: Any) -> np.ndarray:
    """kernels/common.cuh fast_div, in 32-bit unsigned arithmetic."""
    un = np.asarray(n, dtype=np.int64)
    assert (un >= 0).all() and (un < 2**31).all(), "fast_div needs 0 <= n < 2**31"
    u = un.astype(np.uint64)
    hi = (u * np.uint64(int(mul))) >> np.uint64(32)
    return (((hi + u) & np.uint64(0xFFFFFFFF)) >> np.uint64(int(shift))).astype(np.int64)



def test_fastdiv_matches_integer_division() -> None:
    rng = np.random.default_rng()
    divisors = [*range(1, 300), *(2**e + d for e in range(9, 31) for d in (-1, 0, 1)),
                *rng.integers(1, 2**31 - 1, 200).tolist()]
    for d in divisors:
        mul, shift = fastdiv(d)
        assert 0 <= mul < 2**32 and 0 <= shift <= 31
        n = np.concatenate([
            rng.integers(0, 2**31 - 1, 2000), [0, 1, d - 1, d, d + 1, 2**31 - 1],
            np.arange(max(0, 7 * d - 5), min(2**31 - 1, 7 * d + 5)),
        ])
        n = n[(n >= 0) & (n < 2**31)]
        np.testing.assert_array_equal(fdiv(n, mul, shift), n // d, err_msg=f"d={d}")


def test_fft_workspace_regions_do_not_overlap() -> None:
    problem = ConvProblem(**SHAPES["groups4"])
    spans = sorted(fft.workspace_layout(problem).values())
    for (o1, n1), (o2, _n2) in itertools.pairwise(spans):
        assert o1 + n1 <= o2 and o2 % 256 == 0


@pytest.mark.parametrize("name", ["fft", "im2col_gemm"])
def test_misaligned_workspace_is_refused_on_the_host(name: str) -> None:
    """A workspace sliced off a boundary must raise, not fault on the GPU."""
    problem = ConvProblem(**SHAPES["odd"], dtype="float64")
    algorithm = ALGOS[name]
    config = algorithm.configs(problem)[0]
    nbytes = algorithm.workspace_bytes(problem, config)
    workspace = dev_at(np.zeros(nbytes + 8, np.uint8), 4)
    x = dev(np.zeros(problem.input_shape, problem.dtype))
    w = dev(np.zeros(problem.filter_shape, problem.dtype))
    y = dev(np.zeros(problem.output_shape, problem.dtype))
    with pytest.raises(ValueError, match="aligned"):
        algorithm.run(x, w, y, workspace, problem, config)


# Pins: a 2-byte-aligned workspace put float16 backward_filter's float32 dW sum off its
# 4-byte alignment (a fault on the GPU); run() must refuse it on the host.
def test_float16_backward_filter_workspace_must_hold_float32() -> None:
    """im2col_gemm's float16 dW sum is float32: a 2-byte-aligned workspace is refused."""
    problem = ConvProblem(**SHAPES["odd"], dtype="float16", direction="backward_filter")
    algorithm = ALGOS["im2col_gemm"]
    config = algorithm.configs(problem)[0]
    column = algorithm.workspace_bytes(replace(problem, direction="forward"), config)
    assert config == "chunk=1"
    # Then dyT, align(1*7*17*13 * 2) (one image's dy as [k][img][pq]), and the float32 sum,
    # align(7*5*9 * 4).
    assert algorithm.workspace_bytes(problem, config) == column + 3328 + 1280
    workspace = dev_at(np.zeros(algorithm.workspace_bytes(problem, config) + 8, np.uint8), 2)
    x, dy, dw = (dev(np.zeros(s, np.float16)) for s in problem.operand_shapes)
    with pytest.raises(ValueError, match="4-byte aligned"):
        algorithm.run(x, dy, dw, workspace, problem, config)


def test_fft_sizes_are_never_1() -> None:
    """cuFFT is never asked for a transform side of 1 (W = 1 for 1-D convolutions)."""
    for kw in (ALIGN_SHAPES["one_pixel"], ALIGN_SHAPES["conv1d_hx1"]):
        fh, fw = fft.fft_size(ConvProblem(**kw))
        assert fh >= 2 and fw >= 2


def test_fft_workspace_regions_are_aligned_for_every_dtype() -> None:
    for dtype in ("float16", "float32", "float64"):
        for kw in (*SHAPES.values(), *ALIGN_SHAPES.values()):
            problem = ConvProblem(**kw, dtype=dtype)
            layout = fft.workspace_layout(problem)
            total = fft.FftCuda().workspace_bytes(problem, "default")
            spans = sorted(layout.values())
            assert all(offset % 256 == 0 for offset, _ in spans)
            assert spans[-1][0] + spans[-1][1] <= total
            for (o1, n1), (o2, _n2) in itertools.pairwise(spans):
                assert o1 + n1 <= o2


def test_fused_fft_is_offered_where_its_kernels_fit() -> None:
    """fft's "fused" configuration: 16- and 32-bit planes within 32 x 32, filters of more than
    one tap, at most FUSED_MAX_GEMMS GEMM calls; the smallest power of two N covering
    H + pad, the last output row's start and the filter's reach."""
    def offered(**kw: Any) -> bool:
        return "fused" in fft.FftCuda().configs(ConvProblem(**kw))

    inception: dict[str, Any] = dict(n=32, c=32, h=28, w=28, k=96, r=5, s=5, pad=(2, 2))
    assert offered(**inception)
    assert _fft_fused.size(ConvProblem(**inception)) == 32  # 28 + 2, not 28 + 4
    assert _fft_fused.size(ConvProblem(**{**inception, "h": 14, "w": 14})) == 16  # 14 + 2
    assert not offered(**{**inception, "dtype": "float64"})  # cuFFT keeps float64
    assert not offered(**{**inception, "r": 1, "s": 1, "pad": (0, 0)})  # one tap
    assert not offered(**{**inception, "h": 31, "w": 31})  # 31 + 2 > 32
    # A depthwise layer: 96 groups are 96 GEMM calls at n = 32, one call at n = 1.
    depthwise: dict[str, Any] = dict(c=96, h=14, w=14, k=96, r=3, s=3, pad=(1, 1), groups=96)
    assert not offered(n=32, **depthwise)
    assert offered(n=1, **depthwise)


def test_fused_fft_workspace_holds_the_three_spectra() -> None:
    problem = ConvProblem(n=2, c=6, h=14, w=14, k=4, r=3, s=3, pad=(1, 1), groups=2)
    f = 16 * 9  # N = 16 (14 + 1 -> 16): 16 x 9 frequencies
    sizes = [f * 2 * 6 * 8, f * 4 * 3 * 8, f * 2 * 4 * 8]  # xt, wt (k x c/groups), yt
    assert fft.FftCuda().workspace_bytes(problem, "fused") == sum(-(-s // 256) * 256
                                                                  for s in sizes)


# --- launch limits on problems too big to emulate -------------------------------------------------
GRID_X_LIMIT, GRID_YZ_LIMIT, SMEM_LIMIT = 2**31 - 1, 65535, 48 * 1024
#: The most dynamic shared memory a kernel may opt in to on every sm_80+ GPU (sm_86, sm_89).
SMEM_OPT_IN_LIMIT = 99 * 1024


def _checked_launch(filename: str, name_expression: str) -> Callable[..., None]:
    """A kernel stand-in that checks only the launch: grid and block limits, shared memory
    (beyond 48 KiB only as far as the kernel opted in), 32-bit scalar arguments (Python
    ints would be passed as 64-bit and shift the rest)."""

    def kernel(grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...],
               shared_mem: int = 0) -> None:
        assert 1 <= len(grid) <= 3 and 1 <= len(block) <= 3
        assert all(isinstance(v, int) and v >= 1 for v in (*grid, *block))
        assert grid[0] <= GRID_X_LIMIT and all(v <= GRID_YZ_LIMIT for v in grid[1:])
        limit = getattr(kernel, "max_dynamic_shared_size_bytes", SMEM_LIMIT)
        assert int(np.prod(block)) <= 1024 and 0 <= shared_mem <= limit <= SMEM_OPT_IN_LIMIT
        for a in args:
            if isinstance(a, np.void):  # a structure by value: ConvShape alone so far
                assert a.dtype == _loader.CONV_SHAPE, a.dtype
            elif isinstance(a, np.generic):
                assert isinstance(a, (np.int32, np.uint32, np.uint64, np.float32,
                                      np.float64)), a
            else:
                assert hasattr(a, "data"), f"kernel argument {a!r} is not an array or scalar"
        LAUNCHES.append({"file": filename, "kernel": name_expression, "grid": grid,
                         "block": block})

    return kernel


def _checked_gemm(dtype: str, transa: int, transb: int, m: int, n: int, k: int,
                  a: int, lda: int, sa: int, b: int, ldb: int, sb: int,
                  c: int, ldc: int, sc: int, batch: int, accumulate: bool = False,
                  float32_c: bool = False, tf32: bool = False) -> None:
    assert min(m, n, k, batch) >= 1 and max(m, n, k, lda, ldb, ldc) <= 2**31 - 1
    assert not tf32 or dtype == "float32"
    assert batch <= _cublas.MAX_BATCH
    assert ldc >= m and lda >= (m if transa == 0 else k) and ldb >= (k if transb == 0 else n)


class _NullPlan:
    def __init__(self, fft_type: int, batch: int, fh: int, fw: int) -> None:
        assert batch <= 2**31 - 1 and fh >= 2 and fw >= 2

    def fft(self, a: Any, out: Any, direction: int) -> None:
        pass


class _Sized:
    """A buffer that exists only as an (aligned) address and a size."""

    def __init__(self, nbytes: int, ptr: int = 1 << 40) -> None:
        self.data = SimpleNamespace(ptr=ptr)
        self.size = nbytes

    def __getitem__(self, part: slice) -> _Sized:
        """A byte range, as algorithms.base.workspace_view slices a workspace."""
        start = part.start or 0
        stop = self.size if part.stop is None else part.stop
        return _Sized(stop - start, self.data.ptr + start)

    def view(self, dtype: Any) -> _Sized:
        return self

    def reshape(self, shape: tuple[int, ...]) -> _Sized:
        return self


BIG_PROBLEMS: dict[str, dict[str, Any]] = {
    "batch_over_grid_yz": dict(n=70000, c=1, h=3, w=3, k=2, r=3, s=3, pad=1),
    "groups_over_grid_yz": dict(n=1, c=70000, h=2, w=2, k=70000, r=1, s=1, groups=70000),
    "k_tiles_over_grid_yz": dict(n=1, c=1, h=2, w=2, k=600000, r=1, s=1),
    "near_int32": dict(n=64, c=512, h=224, w=224, k=64, r=3, s=3, pad=1),
    "huge_dilation": dict(n=1, c=2, h=300, w=300, k=2, r=3, s=3, dilation=100),
    # Depthwise: just under 2**31 input elements, and a footprint over 48 KB for every tile
    # (the flat instances serve it).
    "depthwise_near_int32": dict(n=64, c=512, h=255, w=255, k=512, r=3, s=3, pad=1,
                                 groups=512),
    "depthwise_huge_dilation": dict(n=1, c=2, h=300, w=300, k=4, r=3, s=3, dilation=100,
                                    groups=2),
}


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("direction", ["forward", "backward_data", "backward_filter"])
@pytest.mark.parametrize("shape", list(BIG_PROBLEMS))
@pytest.mark.parametrize("name", ["direct", "im2col_gemm", "implicit_gemm", "implicit_gemm_tc",
                                  "depthwise"])
def test_launches_stay_within_device_limits(monkeypatch: pytest.MonkeyPatch, name: str,
                                            shape: str, direction: str, dtype: str) -> None:
    """Whatever supports() accepts launches within grid, block and shared-memory limits."""
    gemms: list[int] = []

    def gemm(*args: Any, **kwargs: Any) -> None:
        _checked_gemm(*args, **kwargs)
        gemms.append(args[15])  # the batch

    for module in KERNEL_MODULES:
        monkeypatch.setattr(module, "get_kernel", _checked_launch)
    monkeypatch.setattr(_cublas, "_gemm", gemm)
    LAUNCHES.clear()
    problem = ConvProblem(**BIG_PROBLEMS[shape], direction=direction, dtype=dtype)
    algorithm = ALGOS[name]
    if not algorithm.supports(problem):
        assert algorithm.supports(problem).reason
        return
    for config in algorithm.configs(problem):
        ws = algorithm.workspace_bytes(problem, config)
        algorithm.run(_Sized(1), _Sized(1), _Sized(1), _Sized(ws) if ws else None, problem,
                      config)
    assert LAUNCHES or gemms  # a pointwise im2col_gemm may be its GEMMs alone


@pytest.mark.parametrize("shape", ["groups_over_grid_yz", "one_pixel_many_planes"])
def test_fft_launches_stay_within_device_limits(monkeypatch: pytest.MonkeyPatch,
                                                shape: str) -> None:
    kw = BIG_PROBLEMS.get(shape) or dict(n=3000, c=30, h=1, w=1, k=3, r=1, s=1)
    monkeypatch.setattr(fft, "get_kernel", _checked_launch)
    monkeypatch.setattr(_cublas, "_gemm", _checked_gemm)
    monkeypatch.setattr(fft, "_plan", _NullPlan)
    LAUNCHES.clear()
    problem = ConvProblem(**kw)
    algorithm = ALGOS["fft"]
    if not algorithm.supports(problem):
        assert algorithm.supports(problem).reason
        return
    ws = algorithm.workspace_bytes(problem, "default")
    algorithm.run(_Sized(1), _Sized(1), _Sized(1), dev(np.zeros(ws, np.uint8)), problem,
                  "default")
    assert LAUNCHES


@pytest.mark.parametrize(("name", "direction"), [
    *itertools.product(["direct", "implicit_gemm", "implicit_gemm_tc"],
                       ["forward", "backward_data", "backward_filter"]),
    ("depthwise", "forward"),
])
def test_work_describes_what_run_launches(monkeypatch: pytest.MonkeyPatch, name: str,
                                          direction: str) -> None:
    """An algorithm's `work` (what the cost model reads) counts the launches `run` makes,
    and its blocks are the grid of the algorithm's own first kernel."""
    for module in KERNEL_MODULES:
        monkeypatch.setattr(module, "get_kernel", _checked_launch)
    algorithm = ALGOS[name]
    assert isinstance(algorithm, AlgorithmBase)  # `work` is AlgorithmBase's, not the protocol's
    own_file = next(m.KERNEL_FILE for m in KERNEL_MODULES
                    if m.__name__.endswith(f".{name}"))
    checked = 0
    for shape in ("odd", "groups4", "stride_pair", "depthwise", "r50_res2_1x1", "r50_res5_1x1a",
                  "single_pixel"):
        problem = ConvProblem(**SHAPES[shape], direction=direction)
        if not algorithm.supports(problem):
            continue
        for config in algorithm.configs(problem):
            LAUNCHES.clear()
            ws = algorithm.workspace_bytes(problem, config)
            algorithm.run(_Sized(1), _Sized(1), _Sized(1), _Sized(ws) if ws else None,
                          problem, config)
            work = algorithm.work(problem, config)
            assert work.launches == len(LAUNCHES), (shape, config)
            main = next(launch for launch in LAUNCHES if launch["file"] == own_file)
            assert work.blocks == int(np.prod(main["grid"])), (shape, config)
            assert 0 < work.fill <= 1
            checked += 1
    assert checked


def test_work_fill_is_whole_only_when_tiles_divide_the_output() -> None:
    """fill is 1 when the tiles cover the output exactly, and the covered share otherwise."""
    tc, direct = ALGOS["implicit_gemm_tc"], ALGOS["direct"]
    assert isinstance(tc, AlgorithmBase) and isinstance(direct, AlgorithmBase)
    exact = ConvProblem(n=2, c=16, h=8, w=8, k=64, r=1, s=1)  # 128 pixels, 64 channels
    assert tc.work(exact, "64x128").fill == 1.0
    ragged = ConvProblem(n=1, c=16, h=10, w=10, k=48, r=1, s=1)  # 100 pixels, 48 channels
    assert tc.work(ragged, "64x128").fill == pytest.approx(100 * 48 / (128 * 64))
    assert direct.work(ConvProblem(n=1, c=4, h=16, w=16, k=8, r=3, s=3, pad=1),
                       "16x16k8").fill == 1.0
    assert direct.work(ConvProblem(n=1, c=4, h=17, w=16, k=8, r=3, s=3, pad=1),
                       "16x16k8").fill == pytest.approx(17 / 32)


def test_gemm_batches_are_split_for_cublas(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch over MAX_BATCH becomes consecutive calls whose operands advance by the strides."""
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(_cublas, "_gemm", lambda *args: calls.append(args))
    batch, item = 2 * _cublas.MAX_BATCH + 5, 8
    _cublas.gemm_strided_batched("complex64", 2, 0, 3, 4, 5, 1000, 5, 15, 2000, 5, 0,
                                 3000, 3, 12, batch)
    assert [c[-4] for c in calls] == [_cublas.MAX_BATCH, _cublas.MAX_BATCH, 5]
    # beta = 0, C in the operands' type and strict FP32 unless asked otherwise.
    assert [c[-3:] for c in calls] == [(False, False, False)] * 3
    for i, call in enumerate(calls):
        first = i * _cublas.MAX_BATCH
        assert call[:6] == ("complex64", 2, 0, 3, 4, 5)
        assert call[6:15] == (1000 + first * 15 * item, 5, 15, 2000, 5, 0,
                              3000 + first * 12 * item, 3, 12)


def test_depthwise_limits_say_why() -> None:
    algorithm = ALGOS["depthwise"]
    assert "groups == c" in algorithm.supports(ConvProblem(**SHAPES["odd"])).reason
    # No tile's footprint fits 48 KB of shared memory: the flat instances (no shared memory)
    # serve it, except the one compiled for unit stride and dilation along the width.
    huge = ConvProblem(**BIG_PROBLEMS["depthwise_huge_dilation"])
    assert algorithm.supports(huge)
    assert algorithm.configs(huge) == ("flat_q1", "flat_q1_3x3")
    assert algorithm.supports(ConvProblem(**BIG_PROBLEMS["depthwise_near_int32"]))
    over = ConvProblem(**{**BIG_PROBLEMS["depthwise_near_int32"], "h": 256, "w": 256})
    assert "2**31" in algorithm.supports(over).reason


def test_depthwise_offers_compiled_in_filter_sizes_only_for_them() -> None:
    configs = {(r, s): set(ALGOS["depthwise"].configs(
        ConvProblem(n=1, c=4, h=9, w=9, k=4, r=r, s=s, pad=1, groups=4)))
        for r, s in ((3, 3), (5, 5), (3, 1))}
    compiled_3x3 = {"32x16p2_3x3", "16x16p2_3x3", "flat_q1_3x3", "flat_q4_3x3_s1"}
    assert compiled_3x3 <= configs[(3, 3)]
    assert configs[(5, 5)] == configs[(3, 1)] == set(configs[(3, 3)]) - compiled_3x3


class _Function:
    """CuPy's RawKernel, as far as the opt-in goes: counts the attribute's writes."""

    def __init__(self) -> None:
        self.writes: list[int] = []

    @property
    def max_dynamic_shared_size_bytes(self) -> int:
        return self.writes[-1] if self.writes else SMEM_LIMIT

    @max_dynamic_shared_size_bytes.setter
    def max_dynamic_shared_size_bytes(self, nbytes: int) -> None:
        self.writes.append(nbytes)


def test_shared_memory_opt_in_is_set_once_per_kernel_and_only_beyond_48_kib() -> None:
    first, second = _Function(), _Function()
    _loader.allow_shared_memory(first, SMEM_LIMIT)  # within the default: no driver call
    assert first.writes == []
    for _ in range(3):  # runs sit in timed regions: one attribute write, not one per run
        _loader.allow_shared_memory(first, 80 * 1024)
    _loader.allow_shared_memory(first, 64 * 1024)  # less than it already has
    _loader.allow_shared_memory(second, 90 * 1024)
    _loader.allow_shared_memory(first, 90 * 1024)  # more: set again
    assert first.writes == [80 * 1024, 90 * 1024] and second.writes == [90 * 1024]


class _PlainFunction:
    """A plain cupy.cuda.function.Function: a handle, and no settable attribute."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr


def test_shared_memory_opt_in_of_a_plain_function_goes_through_the_driver(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Bug (H100, 2026-11-25): every implicit_gemm_wgmma launch failed with "'Function' object
    # has no attribute 'max_dynamic_shared_size_bytes'": the NVRTC-built sm_90a kernels are
    # plain Functions, which lack RawKernel's property.
    calls: list[tuple[int, int, int]] = []
    monkeypatch.setattr(_loader, "_func_set_attribute", lambda *a: calls.append(a))
    kernel = _PlainFunction(0x7F00)
    _loader.allow_shared_memory(kernel, 160 * 1024)
    _loader.allow_shared_memory(kernel, 100 * 1024)  # already allowed more: no call
    assert calls == [(0x7F00, _loader.MAX_DYNAMIC_SHARED_SIZE_BYTES, 160 * 1024)]


#: im2col_gemm's kernels that store TF32-rounded GEMM operands.
TF32_WRITERS = {*(im2col_gemm.name_expression("float32", inner, tf32=True)
                  for inner in (False, True)),
                im2col_gemm.images_inner_expression("float32", tf32=True), im2col_gemm.ROUND_TF32,
                ROUND_TF32_PAIR}


@pytest.mark.parametrize("geometry", [dict(r=3, s=2, pad=1, stride=2), dict(r=1, s=1)])
@pytest.mark.parametrize("direction", ["forward", "backward_data", "backward_filter"])
@pytest.mark.parametrize("math", ["fp32", "tf32"])
def test_im2col_gemm_reads_tf32_only_from_rounded_copies(monkeypatch: pytest.MonkeyPatch,
                                                         math: str, direction: str,
                                                         geometry: dict[str, Any]) -> None:
    """Under math "tf32" every GEMM computes in TF32 on operands our kernels rounded (cuBLAS
    would truncate the caller's); under "fp32" none does. `work` counts the launches. A
    pointwise layer (the second geometry) reads x itself only under "fp32"."""
    gemms: list[bool] = []

    def gemm(*args: Any) -> None:
        _checked_gemm(*args)
        gemms.append(args[-1])

    monkeypatch.setattr(_loader, "get_kernel", _checked_launch)
    for module in KERNEL_MODULES:
        monkeypatch.setattr(module, "get_kernel", _checked_launch)
    monkeypatch.setattr(_cublas, "_gemm", gemm)
    algorithm = ALGOS["im2col_gemm"]
    assert isinstance(algorithm, AlgorithmBase)  # `work` is AlgorithmBase's
    problem = ConvProblem(n=5, c=6, h=9, w=8, k=4, **geometry, direction=direction, math=math)
    for config in algorithm.configs(problem):
        LAUNCHES.clear()
        gemms.clear()
        ws = algorithm.workspace_bytes(problem, config)
        algorithm.run(_Sized(1), _Sized(1), _Sized(1), _Sized(ws) if ws else None, problem,
                      config)
        kernels = [launch["kernel"] for launch in LAUNCHES]
        assert gemms and set(gemms) == {math == "tf32"}, config
        # The kernels that write a GEMM operand: rounding instances exactly under "tf32".
        writers = [k for k in kernels if not k.startswith("col2im")]
        if config == im2col_gemm.MERGED and (direction == "forward" or problem.pointwise):
            # Its last launch copies the GEMM's output to y (or, pointwise, the column
            # matrix to dx: col2im's gather is that copy there), not an operand.
            assert writers[-1] == im2col_gemm.images_inner_expression("float32"), kernels
            writers = writers[:-1]
        assert set(map(TF32_WRITERS.__contains__, writers)) <= {math == "tf32"}, kernels
        if config == im2col_gemm.MERGED and problem.pointwise:
            # Its column matrix is x (dx) with images and channels swapped: plain copies,
            # not im2col's (col2im's) per-tap arithmetic.
            assert not [k for k in kernels if k.startswith(("im2col", "col2im"))], kernels
        rounds = [k for k in kernels if k in (im2col_gemm.ROUND_TF32, ROUND_TF32_PAIR)]
        assert bool(rounds) == (math == "tf32" and direction != "backward_filter")
        assert algorithm.work(problem, config).launches == len(kernels) + len(gemms), config
        # Regression: w and the first chunk's operand were rounded by two launches, one
        # more host-bound launch per run; the two leading roundings are one launch now.
        # (Both are copies where the layer is pointwise forward, and in backward_data.)
        paired = rounds and config != im2col_gemm.MERGED and (
            direction == "backward_data" or problem.pointwise)
        assert (kernels[:1] == [ROUND_TF32_PAIR]) == bool(paired), kernels
        assert kernels[1:].count(ROUND_TF32_PAIR) == 0


def test_nhwc_copies_write_where_the_views_would() -> None:
    """The NHWC copies and split K's partial sums are passed as byte ranges of the workspace
    (`WorkspaceLayout.byte_ranges`), which must be exactly the named views' memory."""
    problem = ConvProblem(n=3, c=24, h=5, w=6, k=18, r=3, s=2, pad=2, dilation=2, groups=3,
                          dtype="float32", math="fp32")
    for config in ("64x128x32-s4", "64x128x32-s4-k2"):
        layout = implicit_gemm_wgmma.workspace_layout(problem, config)
        workspace: Any = dev(np.zeros(layout.nbytes, np.uint8))
        views = layout.views(workspace)
        tile = _wgmma_configs.parse_config("float32", "fp32", config).tile
        assert isinstance(tile, _wgmma_configs.WgmmaTile)
        copies = _rearrange.nhwc_copies(problem, implicit_gemm_wgmma.nhwc_parts(problem, tile))
        for name, span in (("x", copies.x_bytes), ("w", copies.w_bytes)):
            part = workspace[span]
            assert part.data.ptr == views[name].data.ptr and part.nbytes == views[name].nbytes
        if "part" in views:
            part = layout.byte_ranges()["part"]
            assert workspace[part.start:].data.ptr == views["part"].data.ptr
            assert part.stop - part.start == views["part"].nbytes


def test_shape_struct_holds_the_shape_ints_in_order() -> None:
    """The ConvShape structure that the implicit-GEMM, tensor-core and im2col kernels take
    carries exactly the CONV_SHAPE_PARAMS ints, in their order (32-bit, no padding)."""
    problem = ConvProblem(n=2, c=6, h=9, w=7, k=4, r=3, s=2, pad=(1, 0), stride=(2, 1),
                          dilation=(1, 2), groups=2)
    (packed,) = _loader.shape_struct(problem)
    assert packed.dtype.itemsize == 16 * 4
    assert packed.tobytes() == np.array(_loader.shape_args(problem), np.int32).tobytes()
    assert [int(v) for v in packed.item()][:9] == [2, 6, 9, 7, 4, 3, 2, 5, 5]


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build a stand-in")
def test_cublas_receives_each_argument_as_its_c_type(tmp_path: Any,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """_Cublas.gemm passes its 23 arguments without ctypes argtypes (they cost most of a
    call's host time): a stand-in libcublas records what arrives, 64-bit addresses and
    strides and a negative algorithm included."""
    library = cublas_call_cost.build_standin(tmp_path)
    recorder = ctypes.CDLL(str(library))
    recorder.last_values.restype = ctypes.POINTER(ctypes.c_longlong)
    recorder.last_pointers.restype = ctypes.POINTER(ctypes.c_void_p)
    blas = cublas_call_cost.standin_cublas(library)
    monkeypatch.setattr(_cublas, "_library", lambda: blas)
    a, b, c = (1 << 45) + 256, (1 << 46) + 512, (1 << 47) + 1024
    strides = (3 << 33, 5 << 33, 7 << 33)
    _cublas.gemm_strided_batched("float16", _cublas.OP_T, _cublas.OP_N, 196, 1024, 256,
                                 a, 256, strides[0], b, 256, strides[1], c, 196, strides[2],
                                 32, accumulate=True, float32_c=True)
    values = [recorder.last_values()[i] for i in range(17)]
    assert values == [1, 0, 196, 1024, 256, 2, 256, strides[0], 2, 256, strides[1], 0, 196,
                      strides[2], 32, 68, -1]
    pointers = [recorder.last_pointers()[i] for i in range(6)]
    assert pointers == [cublas_call_cost.STANDIN_HANDLE, _cublas._ONE["float16"].value, a, b,
                        _cublas._ONE["float16"].value, c]


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build a stand-in")
def test_cublaslt_matmul_is_worked_out_once_per_shape(tmp_path: Any,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """With CONVTUNE_CUBLASLT=1 a GEMM goes through cublasLtMatmul: its descriptors say the
    GEMM's types, transposes, layouts, batch and strides, the heuristic runs once per shape
    and gets our workspace limit, and the call passes the kept algorithm, C as D, our
    workspace and the current stream. A shape without an algorithm falls back to
    cublasGemmStridedBatchedEx."""
    monkeypatch.setenv(_cublaslt.ENV, "1")
    lt_library = cublas_call_cost.build_standin(tmp_path, cublas_call_cost.LT_STANDIN_SOURCE,
                                                "cublaslt_standin")
    library = cublas_call_cost.build_standin(tmp_path)
    blas = cublas_call_cost.standin_cublas(library, lt_library)
    monkeypatch.setattr(_cublas, "_library", lambda: blas)
    lt, recorder = ctypes.CDLL(str(lt_library)), ctypes.CDLL(str(library))
    lt.lt_last.restype = ctypes.POINTER(ctypes.c_longlong)
    recorder.last_values.restype = ctypes.POINTER(ctypes.c_longlong)
    a, b, c = (1 << 45) + 256, (1 << 46) + 512, (1 << 47) + 1024
    for _ in range(2):
        _cublas.gemm_strided_batched("float16", _cublas.OP_T, _cublas.OP_N, 196, 1024, 256,
                                     a, 256, 3 << 33, b, 256, 5 << 33, c, 196, 7 << 33, 32,
                                     accumulate=True, float32_c=True)
    got = [lt.lt_last()[i] for i in range(33)]
    # compute 32F, float scale, A^T: A is k x m (256 x 196), B k x n, C m x n (float32: 0).
    assert got[:4] == [68, 0, 1, 0]
    assert got[4:10] == [2, 256, 196, 256, 32, 3 << 33]
    assert got[10:16] == [2, 256, 1024, 256, 32, 5 << 33]
    assert got[16:22] == [0, 196, 1024, 196, 32, 7 << 33]
    assert got[22:26] == [1, _cublas.WORKSPACE_BYTES, cublas_call_cost.ALGO_MARK, a]
    assert got[26:29] == [b, c, c]
    assert got[29:33] == [cublas_call_cost.STANDIN_WORKSPACE, _cublas.WORKSPACE_BYTES,
                          cublas_call_cost.STANDIN_STREAM, 1]  # one heuristic, two calls
    lt.lt_no_algorithm(1)  # a new shape the heuristic has nothing for
    _cublas.gemm_strided_batched("float32", _cublas.OP_N, _cublas.OP_N, 8, 8, 8, a, 8, 64,
                                 b, 8, 64, c, 8, 64, 3)
    assert recorder.last_values()[2] == 8 and recorder.last_values()[14] == 3
    assert lt.lt_last()[32] == 1  # the Lt matmul was not called again


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build a stand-in")
def test_cublaslt_lists_algorithms_and_runs_the_one_given(tmp_path: Any) -> None:
    """Lt.algorithms asks the heuristic for several algorithms of a matmul (the stand-in
    offers one), and Lt.run passes the one it is given, else the matmul's own."""
    library = ctypes.CDLL(str(cublas_call_cost.build_standin(
        tmp_path, cublas_call_cost.LT_STANDIN_SOURCE, "cublaslt_standin")))
    library.lt_last.restype = ctypes.POINTER(ctypes.c_longlong)
    lt = _cublaslt.Lt(library, 1024)
    matmul = lt.matmul(0, 0, 0, 68, 0, 0, 0, 8, 8, 8, 8, 64, 8, 64, 8, 64, 2)
    found = lt.algorithms(0, matmul, 4)
    assert matmul.found and len(found) == 1
    assert int.from_bytes(found[0].raw[:8], "little") == cublas_call_cost.ALGO_MARK
    other = ctypes.create_string_buffer(_cublaslt.RESULT_BYTES)
    other.raw = (0x5EED).to_bytes(8, "little") + bytes(_cublaslt.RESULT_BYTES - 8)
    for algorithm, word in ((None, cublas_call_cost.ALGO_MARK), (other, 0x5EED),
                            (found[0], cublas_call_cost.ALGO_MARK)):
        lt.run(0, matmul, _cublas._ONE["float32"], 1 << 40, 2 << 40, _cublas._ZERO["float32"],
               3 << 40, 4 << 40, 5, algorithm=algorithm)
        assert library.lt_last()[24] == word

