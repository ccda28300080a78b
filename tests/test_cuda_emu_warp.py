"""The warp-level PTX of tests/cuda_emu/warp.h against NumPy models of the PTX ISA layouts.

Each instruction runs in a one-warp kernel (tests/cuda_emu/warp_kernels.cu) that gathers its
fragments by the documented layout; the result must equal the model. Each check is shown to
bite by an injected bug (the kernels' `bug` argument):

| instruction | injected bug | caught as |
|---|---|---|
| mma m16n8k8 tf32 | a1/a2 fragment registers swapped | result != model |
| mma m16n8k8 tf32 | raw floats instead of cvt.rna.tf32 | result != model (low bits dropped) |
| mma m16n8k16 f16/bf16 | b0/b1 fragment registers swapped | result != model |
| mma m16n8k16 f16 | lanes 16..31 skip the mma | abort: not reached by every lane |
| ldmatrix x4 / x2.trans | lane gives the next lane's row | result != model |
| ldmatrix | row address 8 bytes off | abort: misaligned shared address |
| cp.async + wait_group | no wait before reading | abort: ASan use-after-poison |
| cp.async + wait_group | wait_group 1, then read group 1 | abort: ASan use-after-poison |
| cp.async 16 B | source 4 bytes off | abort: misaligned cp.async source |
| cp.async | global address as destination | abort: outside shared memory |
| dynamic shared memory | over 48 KiB without an opt-in | abort: names the missing opt-in |
| dynamic shared memory | more than the kernel opted in to | abort: over the opt-in |
| wgmma m64n8 f16 / tf32 | A descriptor with LBO and SBO swapped | result != model |
| wgmma m64n8 f16 / tf32 | accumulator registers v and h swapped | result != model |
| wgmma m64n8 f16 | accumulators read before wgmma.wait_group | result != model (NaN) |
| wgmma m64n8 tf32, A in registers | registers a1 and a2 swapped | result != model |
| wgmma m64n8 tf32, A in registers | an A register written before the wait | abort: names it |

The emulator's own bookkeeping of wgmma in flight is pinned the same way, by chains the
kernel runs on request (`bug` 4 to 6: three ops on one set of registers across a
wait_group 1; two ops in one group on the registers in different orders; registers read
while a second group is in flight). Each of these emulator bugs fails one of them:

| emulator bug | caught by |
|---|---|
| a chained op starts from the register (NaN), not from the op in flight | 4 (f16, tf32) |
| an op on reordered registers ignores the ops in flight | 5 |
| a wait writes registers that a younger op in flight also writes | 6 |
| a wait writes the oldest chained result, not the newest | 4 (f16, tf32) |
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.cuda_emu.build import missing_tools, sanitizer_env

ROOT_DIR = Path(__file__).resolve().parents[1]

_missing = missing_tools()
pytestmark = pytest.mark.skipif(_missing is not None, reason=f"cannot emulate: {_missing}")


def _run(tmp_path: Path, kernel: str, bug: int, arrays: list[np.ndarray],
         smem: tuple[int, int] = (0, 48 * 1024),
         threads: int = 32) -> tuple[list[np.ndarray] | None, str]:
    """(the kernel's arrays after the launch, or None if it aborted; its stderr). `smem`:
    the launch's dynamic shared memory and the kernel's opt-in; `threads`: the block's."""
    src, dst = tmp_path / "in.npz", tmp_path / "out.npz"
    named: dict[str, Any] = {f"a{i}": a for i, a in enumerate(arrays)}
    np.savez(src, **named)
    done = subprocess.run(
        [sys.executable, "-m", "tests.cuda_emu.warp_run", kernel, str(bug), str(src), str(dst),
         *map(str, smem), str(threads)],
        capture_output=True, text=True, cwd=ROOT_DIR, env=sanitizer_env(), timeout=600)
    if done.returncode != 0:
        return None, done.stderr
    out = np.load(dst)
    return [out[f"a{i}"] for i in range(len(arrays))], done.stderr


def tf32(x: np.ndarray) -> np.ndarray:
    """cvt.rna.tf32.f32: 10 mantissa bits, ties away from zero."""
    u = x.astype(np.float32).view(np.uint32)
    return ((u + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16), round to nearest even."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bits -> float32."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _close(got: np.ndarray, want: np.ndarray) -> bool:
    return bool(np.abs(got - want).max() <= 1e-6 * np.abs(want).max())


@pytest.mark.parametrize("bug", [0, 1, 2])
def test_mma_tf32(tmp_path: Path, bug: int) -> None:
    rng = np.random.default_rng(1)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((16, 8), (8, 8), (16, 8)))
    out, err = _run(tmp_path, "mma_tf32_kernel", bug, [a, b, c, np.full((16, 8), np.nan,
                                                                         np.float32)])
    assert out is not None, err
    want = tf32(a).astype(np.float64) @ tf32(b) + c
    assert _close(out[3], want) == (bug == 0)


@pytest.mark.parametrize(("dtype", "bug"), [("half_t", 0), ("half_t", 1), ("bf16_t", 0),
                                            ("bf16_t", 1)])
def test_mma_k16(tmp_path: Path, dtype: str, bug: int) -> None:
    rng = np.random.default_rng(2)
    a32, b32 = rng.standard_normal((16, 16)), rng.standard_normal((16, 8))
    c = rng.standard_normal((16, 8)).astype(np.float32)
    if dtype == "half_t":
        a_bits, b_bits = (m.astype(np.float16).view(np.uint16) for m in (a32, b32))
        a_val, b_val = (m.view(np.float16).astype(np.float64) for m in (a_bits, b_bits))
    else:
        a_bits, b_bits = to_bf16(a32), to_bf16(b32)
        a_val, b_val = from_bf16(a_bits).astype(np.float64), from_bf16(b_bits)
    out, err = _run(tmp_path, f"mma_k16_kernel<{dtype}>", bug,
                    [a_bits, b_bits, c, np.full((16, 8), np.nan, np.float32)])
    assert out is not None, err
    assert _close(out[3], a_val @ b_val + c) == (bug == 0)


# Regression guard for a divergent warp at mma.sync: lanes 16..31 skipping it must not pass.
def test_mma_divergence_is_detected(tmp_path: Path) -> None:
    z = np.zeros((16, 16), np.uint16)
    out, err = _run(tmp_path, "mma_k16_kernel<half_t>", 3,
                    [z, z[:, :8].copy(), np.zeros((16, 8), np.float32),
                     np.zeros((16, 8), np.float32)])
    assert out is None and "not reached by every lane" in err, err


def _ldmatrix_model(src: np.ndarray) -> np.ndarray:
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


@pytest.mark.parametrize("bug", [0, 1, 2])
def test_ldmatrix(tmp_path: Path, bug: int) -> None:
    src = np.random.default_rng(3).integers(0, 65536, (32, 8)).astype(np.uint16)
    out, err = _run(tmp_path, "ldmatrix_kernel", bug, [src, np.zeros(192, np.uint32)])
    if bug == 2:
        assert out is None and "misaligned shared-memory address" in err, err
        return
    assert out is not None, err
    assert np.array_equal(out[1], _ldmatrix_model(src)) == (bug == 0)


@pytest.mark.parametrize(("bug", "message"), [
    (0, None), (1, "use-after-poison"), (2, "use-after-poison"),
    (3, "misaligned cp.async source"), (4, "cp.async destination outside shared memory")])
def test_cp_async(tmp_path: Path, bug: int, message: str | None) -> None:
    src = np.random.default_rng(4).standard_normal(256).astype(np.float32) + 10
    out, err = _run(tmp_path, "cp_async_kernel", bug,
                    [src, np.full(256, np.nan, np.float32), np.zeros(4, np.float32)])
    if message is not None:
        assert out is None and message in err, err
        return
    assert out is not None, err
    zero = (np.arange(32) % 5 == 4)[:, None]
    want0 = np.where(zero, 0, src[:128].reshape(32, 4))
    want1 = np.where(zero, 0, src[128:].reshape(32, 4))
    want1[:, 3] = 7.0
    assert np.array_equal(out[1][:128].reshape(32, 4), want0)
    assert np.array_equal(out[1][128:].reshape(32, 4), want1)


@pytest.mark.parametrize(("smem", "opt_in", "message"), [
    (80 * 1024, 80 * 1024, None),
    (48 * 1024, 48 * 1024, None),
    (80 * 1024, 48 * 1024, "over 48 KiB without an opt-in"),
    (80 * 1024, 64 * 1024, "over the kernel's opt-in"),
    (80 * 1024, 300 * 1024, "more shared memory than a GPU has"),
])
def test_dynamic_shared_memory_beyond_48_kib_needs_the_kernels_opt_in(
        tmp_path: Path, smem: int, opt_in: int, message: str | None) -> None:
    # The `bug` argument carries the byte count the kernel uses: all of the launch's.
    out, err = _run(tmp_path, "dynamic_smem_kernel", smem, [np.zeros(32, np.float32)],
                    (smem, opt_in))
    if message is not None:
        assert out is None and message in err, err
        return
    assert out is not None, err
    assert np.array_equal(out[0], 3.0 * np.arange(32, dtype=np.float32))


def _tf32_truncated(x: np.ndarray) -> np.ndarray:
    """What the tensor core reads of a float as a .tf32 operand: its 19 high bits."""
    bits = x.astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
    return bits.view(np.float32).astype(np.float64)


@pytest.mark.parametrize(("dtype", "bug"), [("half_t", 0), ("half_t", 1), ("half_t", 2),
                                            ("half_t", 3), ("half_t", 4), ("half_t", 5),
                                            ("half_t", 6),
                                            ("float", 0), ("float", 1), ("float", 2),
                                            ("float", 4)])
def test_wgmma_m64n8(tmp_path: Path, dtype: str, bug: int) -> None:
    # The model: D = A . B^T + C with A (64 x K) and B (8 x K) as the PTX ISA's K-major
    # canonical layout holds them, f16 exact, tf32 truncated to 19 bits.
    rng = np.random.default_rng(5)
    k = 16 if dtype == "half_t" else 8
    a64, b64 = rng.standard_normal((64, k)), rng.standard_normal((8, k))
    c = rng.standard_normal((64, 8)).astype(np.float32)
    if dtype == "half_t":
        a, b = a64.astype(np.float16).view(np.uint16), b64.astype(np.float16).view(np.uint16)
        a_val, b_val = (m.view(np.float16).astype(np.float64) for m in (a, b))
    else:
        a, b = a64.astype(np.float32), b64.astype(np.float32)
        a_val, b_val = _tf32_truncated(a), _tf32_truncated(b)
    out, err = _run(tmp_path, f"wgmma_kernel<{dtype}>", bug,
                    [a, b, c, np.full((64, 8), np.nan, np.float32)], (2304, 48 * 1024), 128)
    assert out is not None, err
    if bug in (3, 6):  # the emulator holds a wgmma's results back as NaN until its wait
        assert np.isnan(out[3]).all()
        return
    product = a_val @ b_val.T
    if bug == 4:  # three chained wgmma, one still in flight over a wait_group 1
        assert _close(out[3], 3 * product + c)
        return
    if bug == 5:  # the second wgmma's registers in h-swapped order: columns 2t and 2t+1
        assert _close(out[3], product + product[:, [1, 0, 3, 2, 5, 4, 7, 6]] + c)
        return
    assert _close(out[3], product + c) == (bug == 0)


@pytest.mark.parametrize("bug", [0, 1, 2])
def test_wgmma_m64n8_with_a_in_registers(tmp_path: Path, bug: int) -> None:
    # The model: D = A . B^T + C, A (64 x 8) read from the documented register fragment, both
    # operands truncated to TF32's 19 bits as the tensor core reads them.
    rng = np.random.default_rng(6)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in ((64, 8), (8, 8)))
    c = rng.standard_normal((64, 8)).astype(np.float32)
    out, err = _run(tmp_path, "wgmma_rs_kernel", bug,
                    [a, b, c, np.full((64, 8), np.nan, np.float32)], (2304, 48 * 1024), 128)
    if bug == 2:
        assert out is None and "A register was written while the wgmma was in flight" in err
        return
    assert out is not None, err
    product = _tf32_truncated(a) @ _tf32_truncated(b).T
    assert _close(out[3], product + c) == (bug == 0)


_SPIN = """
import sys, time
import numpy as np
from tests.cuda_emu.build import EmulatedKernel
kernel = EmulatedKernel("spin.cu", "spin", ("spin",))
began = time.perf_counter()
kernel((1,), (32,), (np.uint64(int(sys.argv[1])),))
print(time.perf_counter() - began)
"""


def test_spin_waits_its_nanoseconds() -> None:
    """kernels/spin.cu (the head start of CudaRuntime.device_ms) keeps its thread busy for
    the time asked (%globaltimer: the host's steady clock here)."""
    done = subprocess.run([sys.executable, "-c", _SPIN, str(50_000_000)], capture_output=True,
                          text=True, cwd=ROOT_DIR, env=sanitizer_env(), timeout=600)
    assert done.returncode == 0, done.stderr
    assert 0.05 <= float(done.stdout) < 5


_STRUCT = """
import numpy as np
from algorithms.cuda import shipped_kernels
from algorithms.cuda._loader import CONV_SHAPE
from algorithms.cuda.im2col_gemm import KERNEL_FILE, name_expression
from tests.cuda_emu.build import EmulatedKernel
from tests.cuda_emu.host import dev
kernel = EmulatedKernel(KERNEL_FILE, name_expression("float32"), shipped_kernels()[KERNEL_FILE])
short = np.zeros((), dtype=[("a", np.int32, (CONV_SHAPE.itemsize // 4 - 1,))])[()]
try:
    kernel((1,), (1,), (dev(np.zeros(4, np.float32)), dev(np.zeros(4, np.float32)), short,
                        *(np.int32(0),) * 13))
except TypeError as exc:
    print(exc)
"""


def test_a_structure_argument_of_the_wrong_size_is_refused() -> None:
    """ConvShape goes by value (kernels/common.cuh): the emulator checks the structure's
    bytes against the kernel parameter's size, as a GPU would read past a short one."""
    done = subprocess.run([sys.executable, "-c", _STRUCT], capture_output=True, text=True,
                          cwd=ROOT_DIR, env=sanitizer_env(), timeout=600)
    assert done.returncode == 0, done.stderr
    assert "argument 2 is void, the kernel takes 'S'" in done.stdout
