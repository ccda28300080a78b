"""The cases of tests/cuda_emu/warp_kernels.cu: inputs, NumPy models of the PTX ISA layouts,
and what each launch must give, for the emulator (tests/test_cuda_emu_warp.py) and for a
real GPU (tests/gpu/test_warp_layouts_gpu.py) alike.

One oracle for both: the emulator's warp instructions are what every emulated kernel test
rests on, and a layout the emulator and the oracle got wrong together would pass on the CPU
and fail only on a GPU. Running the same cases on hardware checks the models themselves.

A case's `holds` reads the arrays after the launch and says whether they are right for its
`bug` (a bug that gives wrong numbers must make the model disagree). A case the emulator
must refuse names its report in `aborts`. `gpu` says what hardware does with the case:
"same" (the same check applies), "refused" (the launch itself fails: a shared-memory size
the kernel did not opt in to), or "undefined" (a race or a fault the emulator reports, whose
outcome on hardware the PTX ISA leaves undefined: not run there).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: The warp kernels' source, an absolute path (translate.translate takes one).
WARP_KERNELS = str(Path(__file__).resolve().parent / "warp_kernels.cu")
#: What a GPU builds them for: they hold wgmma, which only sm_90a has.
WARP_ARCH = "sm_90a"
#: Every instance the cases launch (built together: one library in the emulator).
WARP_INSTANCES = (
    "mma_tf32_kernel", "mma_k16_kernel<half_t>", "mma_k16_kernel<bf16_t>", "ldmatrix_kernel",
    "cp_async_kernel", "dynamic_smem_kernel", "wgmma_kernel<half_t>", "wgmma_kernel<float>",
    "wgmma_rs_kernel", "mbarrier_kernel", "wgmma_sw128_kernel<half_t>",
    "wgmma_sw128_kernel<bf16_t>", "wgmma_sw128_kernel<float>",
)

#: runtime.h kExpireWaits: a schedule flag under which a deadlocked block's mbarrier waits
#: time out (try_wait false, the global timer an hour on) instead of failing.
EXPIRE_WAITS = 4

#: The dynamic shared memory of the wgmma cases and the opt-in their kernels run with.
_WGMMA_SMEM = (2304, 48 * 1024)


@dataclass(frozen=True, eq=False)
class WarpCase:
    """One launch of a warp kernel and what it must give."""

    kernel: str  # the instance, one of WARP_INSTANCES
    bug: int  # the kernel's `bug` argument (0: none)
    arrays: tuple[np.ndarray, ...]  # its array parameters, in order
    holds: Callable[[list[np.ndarray]], bool] | None = None  # None: must abort
    aborts: str | None = None  # the emulator's report for a case that must abort
    smem: tuple[int, int] = (0, 48 * 1024)  # the launch's dynamic shared memory, opt-in
    threads: int = 32
    gpu: str = "same"  # "same", "refused" or "undefined" (see the module's docstring)
    schedule: int = 0  # the emulator's thread order (runtime.h: 0 forward, 1 reverse), and
    # EXPIRE_WAITS where mbarrier waits time out instead of failing a deadlocked block


def tf32(x: np.ndarray) -> np.ndarray:
    """cvt.rna.tf32.f32: 10 mantissa bits, ties away from zero."""
    u = x.astype(np.float32).view(np.uint32)
    return ((u + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def tf32_truncated(x: np.ndarray) -> np.ndarray:
    """What the tensor core reads of a float as a .tf32 operand: its 19 high bits."""
    bits = x.astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
    return bits.view(np.float32).astype(np.float64)


def to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16), round to nearest even."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bits -> float32."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def close(got: np.ndarray, want: np.ndarray) -> bool:
    """Equal to FP32 accumulation's rounding, relative to the largest expected value."""
    return bool(np.abs(got - want).max() <= 1e-6 * np.abs(want).max())


def _matches(index: int, want: np.ndarray, bug: int) -> Callable[[list[np.ndarray]], bool]:
    """Array `index` equals `want` without a bug, and differs from it with one."""
    return lambda out: close(out[index], want) == (bug == 0)


def _nan(*shape: int) -> np.ndarray:
    return np.full(shape, np.nan, np.float32)


def mma_tf32(bug: int) -> WarpCase:
    """mma m16n8k8 tf32 (bug 1: a1/a2 swapped; 2: raw floats instead of cvt.rna)."""
    rng = np.random.default_rng(1)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((16, 8), (8, 8), (16, 8)))
    want = tf32(a).astype(np.float64) @ tf32(b) + c
    return WarpCase("mma_tf32_kernel", bug, (a, b, c, _nan(16, 8)), _matches(3, want, bug))


def mma_k16(dtype: str, bug: int) -> WarpCase:
    """mma m16n8k16 in float16 or bfloat16 (bug 1: b0/b1 swapped)."""
    rng = np.random.default_rng(2)
    a32, b32 = rng.standard_normal((16, 16)), rng.standard_normal((16, 8))
    c = rng.standard_normal((16, 8)).astype(np.float32)
    if dtype == "half_t":
        a_bits, b_bits = (m.astype(np.float16).view(np.uint16) for m in (a32, b32))
        a_val, b_val = (m.view(np.float16).astype(np.float64) for m in (a_bits, b_bits))
    else:
        a_bits, b_bits = to_bf16(a32), to_bf16(b32)
        a_val, b_val = from_bf16(a_bits).astype(np.float64), from_bf16(b_bits)
    return WarpCase(f"mma_k16_kernel<{dtype}>", bug, (a_bits, b_bits, c, _nan(16, 8)),
                    _matches(3, a_val @ b_val + c, bug))


def mma_divergent() -> WarpCase:
    """Lanes 16..31 skip an mma.sync (bug 3): the emulator must refuse it."""
    z = np.zeros((16, 16), np.uint16)
    return WarpCase("mma_k16_kernel<half_t>", 3,
                    (z, z[:, :8].copy(), np.zeros((16, 8), np.float32),
                     np.zeros((16, 8), np.float32)),
                    aborts="not reached by every lane", gpu="undefined")


def ldmatrix_model(src: np.ndarray) -> np.ndarray:
    """What ldmatrix_kernel writes: x4 fragments of 32 rows, then x2.trans of 16."""
    lane = np.arange(32)
    g, t = lane // 4, lane % 4
    out = np.zeros(192, np.uint32)
    for j in range(4):  # x4: matrix j = rows 8j..8j+7
        m = src[8 * j:8 * j + 8].astype(np.uint32)
        out[lane * 4 + j] = m[g, 2 * t] | (m[g, 2 * t + 1] << 16)
    for j in range(2):  # x2.trans: lane l gets column l/4, rows 2(l%4) and 2(l%4)+1
        m = src[8 * j:8 * j + 8].astype(np.uint32)
        out[128 + lane * 2 + j] = m[2 * t, g] | (m[2 * t + 1, g] << 16)
    return out


def ldmatrix(bug: int) -> WarpCase:
    """ldmatrix x4 and x2.trans (bug 1: a lane gives the next lane's row; 2: a row address 8
    bytes off, which the emulator refuses)."""
    src = np.random.default_rng(3).integers(0, 65536, (32, 8)).astype(np.uint16)
    arrays = (src, np.zeros(192, np.uint32))
    if bug == 2:
        return WarpCase("ldmatrix_kernel", bug, arrays,
                        aborts="misaligned shared-memory address", gpu="undefined")
    want = ldmatrix_model(src)
    return WarpCase("ldmatrix_kernel", bug, arrays,
                    lambda out: np.array_equal(out[1], want) == (bug == 0))


#: cp_async_kernel's bugs and the emulator's report of each.
CP_ASYNC_ABORTS = {1: "use-after-poison", 2: "use-after-poison",
                   3: "misaligned cp.async source", 4: "cp.async destination outside shared memory"}


def cp_async(bug: int) -> WarpCase:
    """Two cp.async groups with zero fill (bugs 1-4: reads before the wait, a misaligned
    source, a global destination: each an emulator report, undefined on hardware)."""
    src = np.random.default_rng(4).standard_normal(256).astype(np.float32) + 10
    arrays = (src, _nan(256), np.zeros(4, np.float32))
    if bug:
        return WarpCase("cp_async_kernel", bug, arrays, aborts=CP_ASYNC_ABORTS[bug],
                        gpu="undefined")
    zero = (np.arange(32) % 5 == 4)[:, None]
    want0 = np.where(zero, 0, src[:128].reshape(32, 4))
    want1 = np.where(zero, 0, src[128:].reshape(32, 4))
    want1[:, 3] = 7.0
    return WarpCase("cp_async_kernel", bug, arrays,
                    lambda out: np.array_equal(out[1][:128].reshape(32, 4), want0)
                    and np.array_equal(out[1][128:].reshape(32, 4), want1))


def dynamic_smem(smem: int, opt_in: int, message: str | None) -> WarpCase:
    """`smem` bytes of dynamic shared memory with the kernel opted in to `opt_in` (the `bug`
    argument carries the byte count the kernel uses: all of the launch's)."""
    want = 3.0 * np.arange(32, dtype=np.float32)
    over_device = opt_in > 228 * 1024  # no GPU has it: the opt-in itself fails there
    return WarpCase("dynamic_smem_kernel", smem, (np.zeros(32, np.float32),),
                    None if message else (lambda out: np.array_equal(out[0], want)),
                    aborts=message, smem=(smem, opt_in),
                    gpu="same" if message is None else
                    "undefined" if over_device else "refused")


def wgmma(dtype: str, bug: int) -> WarpCase:
    """One wgmma m64n8 with both operands in shared memory (see warp_kernels.cu for the bugs
    and the chains 4-6). The model: D = A . B^T + C with A (64 x K) and B (8 x K) as the
    PTX ISA's K-major canonical layout holds them, f16 exact, tf32 truncated to 19 bits."""
    rng = np.random.default_rng(5)
    k = 16 if dtype == "half_t" else 8
    a64, b64 = rng.standard_normal((64, k)), rng.standard_normal((8, k))
    c = rng.standard_normal((64, 8)).astype(np.float32)
    if dtype == "half_t":
        a, b = a64.astype(np.float16).view(np.uint16), b64.astype(np.float16).view(np.uint16)
        a_val, b_val = (m.view(np.float16).astype(np.float64) for m in (a, b))
    else:
        a, b = a64.astype(np.float32), b64.astype(np.float32)
        a_val, b_val = tf32_truncated(a), tf32_truncated(b)
    product = a_val @ b_val.T
    holds: Callable[[list[np.ndarray]], bool]
    gpu = "same"
    if bug in (3, 6):  # the emulator holds a wgmma's results back as NaN until its wait
        holds, gpu = (lambda out: bool(np.isnan(out[3]).all())), "undefined"
    elif bug == 4:  # three chained wgmma, one still in flight over a wait_group 1
        holds = lambda out: close(out[3], 3 * product + c)  # noqa: E731
    elif bug == 5:  # the second wgmma's registers in h-swapped order: columns 2t and 2t+1
        # Registers read by a wgmma while an older one in flight writes them: the emulator's
        # chaining rule, not a documented hardware behaviour.
        holds = lambda out: close(out[3], product + product[:, [1, 0, 3, 2, 5, 4, 7, 6]] + c)  # noqa: E731
        gpu = "undefined"
    else:
        holds = _matches(3, product + c, bug)
    return WarpCase(f"wgmma_kernel<{dtype}>", bug, (a, b, c, _nan(64, 8)), holds,
                    smem=_WGMMA_SMEM, threads=128, gpu=gpu)


def wgmma_rs(bug: int) -> WarpCase:
    """One wgmma m64n8k8 tf32 with A from registers (bug 1: a1/a2 swapped; 2: an A register
    written while the wgmma is in flight, which the emulator refuses)."""
    rng = np.random.default_rng(6)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in ((64, 8), (8, 8)))
    c = rng.standard_normal((64, 8)).astype(np.float32)
    arrays = (a, b, c, _nan(64, 8))
    if bug == 2:
        return WarpCase("wgmma_rs_kernel", bug, arrays,
                        aborts="A register was written while the wgmma was in flight",
                        smem=_WGMMA_SMEM, threads=128, gpu="undefined")
    want = tf32_truncated(a) @ tf32_truncated(b).T + c
    return WarpCase("wgmma_rs_kernel", bug, arrays, _matches(3, want, bug), smem=_WGMMA_SMEM,
                    threads=128)


def mbarrier(bug: int) -> WarpCase:
    """A producer warp handing three rounds to a consumer warp through mbarriers (see
    warp_kernels.cu for the bugs). Each bug leaves the block waiting on a phase that never
    completes, which the emulator reports (a GPU would hang): a consumer waiting on the other
    parity passes round 0 early and then waits a phase behind; a producer that does not wait
    for the stage to empty, run first and not deferred at its arrivals (the reverse
    schedule), completes all three phases of `full` before the consumer reads, which then
    waits for a fourth; `full` expecting 33 arrivals never completes its first."""
    src = np.random.default_rng(7).standard_normal(96).astype(np.float32)
    arrays = (src, _nan(96))
    if bug:
        return WarpCase("mbarrier_kernel", bug, arrays,
                        aborts="an mbarrier wait that no arrival completes", threads=64,
                        gpu="undefined", schedule=1 if bug == 2 else 0)
    want = src.reshape(3, 32)[:, (np.arange(32) + 1) % 32].ravel()
    return WarpCase("mbarrier_kernel", bug, arrays,
                    lambda out: np.array_equal(out[1], want), threads=64)


def mbarrier_gives_up() -> WarpCase:
    """mbarrier's bug 3 (`full` never completes) where waits time out, as a GPU's do: each
    side's wait gives up after MBARRIER_GIVE_UP_NS instead of hanging, the consumer writing -1
    over round 0 and neither touching the rest. The emulator lets time pass (runtime.h
    kExpireWaits); on a GPU the launch must end in about two seconds."""
    src = np.random.default_rng(7).standard_normal(96).astype(np.float32)

    def holds(out: list[np.ndarray]) -> bool:
        return bool((out[1][:32] == -1.0).all() and np.isnan(out[1][32:]).all())

    return WarpCase("mbarrier_kernel", 3, (src, _nan(96)), holds, threads=64,
                    schedule=EXPIRE_WAITS)


def wgmma_sw128(dtype: str, bug: int) -> WarpCase:
    """The production wgmma path (kernels/wgmma.cuh): K-major tiles under the 128-byte
    swizzle, each 128-byte K-step four wgmma whose descriptors advance 32 bytes, two
    warpgroups, N = 128; bug 10 and 11 (float): A from registers, as the NCHW tiles take it.
    The other wgmma cases are unswizzled, so hardware never checked the swizzle model that
    every shipped wgmma tile rests on (a review of the emulator, 2026-11-30). Bug 1: tiles
    stored unswizzled; bug 2: A's descriptor a row into the swizzle pattern."""
    rng = np.random.default_rng(8)
    ks = 64 if dtype != "float" else 32
    a64, b64 = rng.standard_normal((128, ks)), rng.standard_normal((128, ks))
    c = rng.standard_normal((128, 128)).astype(np.float32)
    if dtype == "half_t":
        a, b = a64.astype(np.float16).view(np.uint16), b64.astype(np.float16).view(np.uint16)
        a_val, b_val = (m.view(np.float16).astype(np.float64) for m in (a, b))
    elif dtype == "bf16_t":
        a, b = to_bf16(a64), to_bf16(b64)
        a_val, b_val = from_bf16(a).astype(np.float64), from_bf16(b).astype(np.float64)
    else:
        a, b = a64.astype(np.float32), b64.astype(np.float32)
        a_val, b_val = tf32_truncated(a), tf32_truncated(b)
    kernel, arrays, smem = f"wgmma_sw128_kernel<{dtype}>", (a, b, c, _nan(128, 128)), (
        32768 + 1024, 48 * 1024)
    if bug == 2:  # the PTX ISA asks for a base offset there: refused, undefined on hardware
        return WarpCase(kernel, bug, arrays, aborts="starts off its 1024-byte pattern",
                        smem=smem, threads=256, gpu="undefined")
    return WarpCase(kernel, bug, arrays, _matches(3, a_val @ b_val.T + c, bug % 10),
                    smem=smem, threads=256)


#: Every case, by test id.
CASES: dict[str, WarpCase] = dict([
    *((f"mma_tf32-bug{b}", mma_tf32(b)) for b in (0, 1, 2)),
    *((f"mma_k16-{d}-bug{b}", mma_k16(d, b)) for d in ("half_t", "bf16_t") for b in (0, 1)),
    ("mma_k16-divergent", mma_divergent()),
    *((f"ldmatrix-bug{b}", ldmatrix(b)) for b in (0, 1, 2)),
    *((f"cp_async-bug{b}", cp_async(b)) for b in (0, 1, 2, 3, 4)),
    ("dynamic_smem-80k-opt80k", dynamic_smem(80 * 1024, 80 * 1024, None)),
    ("dynamic_smem-48k-opt48k", dynamic_smem(48 * 1024, 48 * 1024, None)),
    ("dynamic_smem-80k-no-opt", dynamic_smem(80 * 1024, 48 * 1024,
                                             "over 48 KiB without an opt-in")),
    ("dynamic_smem-80k-opt64k", dynamic_smem(80 * 1024, 64 * 1024,
                                             "over the kernel's opt-in")),
    ("dynamic_smem-80k-opt300k", dynamic_smem(80 * 1024, 300 * 1024,
                                              "more shared memory than a GPU has")),
    *((f"wgmma-half_t-bug{b}", wgmma("half_t", b)) for b in range(7)),
    *((f"wgmma-float-bug{b}", wgmma("float", b)) for b in (0, 1, 2, 4)),
    *((f"wgmma_rs-bug{b}", wgmma_rs(b)) for b in (0, 1, 2)),
    *((f"mbarrier-bug{b}", mbarrier(b)) for b in (0, 1, 2, 3)),
    ("mbarrier-bug3-gives-up", mbarrier_gives_up()),
    *((f"wgmma_sw128-{d}-bug{b}", wgmma_sw128(d, b)) for d in ("half_t", "bf16_t", "float")
      for b in (0, 1)),
    ("wgmma_sw128-half_t-bug2", wgmma_sw128("half_t", 2)),
    *((f"wgmma_sw128-float-bug{b}", wgmma_sw128("float", b)) for b in (10, 11)),
])
