"""The warp-level PTX of tests/cuda_emu/warp.h against NumPy models of the PTX ISA layouts.

Each instruction runs in a one-warp kernel (tests/cuda_emu/warp_kernels.cu) that gathers its
fragments by the documented layout; the result must equal the model. The cases (inputs,
models, expected reports) are tests/cuda_emu/warp_cases.py's, which tests/gpu/
test_warp_layouts_gpu.py runs on a GPU too, so that hardware checks the models themselves.
Each check is shown to bite by an injected bug (the kernels' `bug` argument):

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
| mbarrier arrive / try_wait.parity | the consumer waits on the other parity | abort: deadlock |
| mbarrier | the producer refills the stage without waiting for it to empty | abort: deadlock |
| mbarrier | a phase expecting one arrival more than it gets | abort: deadlock |
| mbarrier, waits timing out (kExpireWaits) | a wait that never gives up | abort: deadlock |

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

And the mbarrier model: an arrival that never flips the phase, or try_wait.parity read the
other way round, fails mbarrier's bug-free case; a timed-out try_wait that says the phase
completed, or a timeout that lets no time pass on the global timer, fails the give-up case
(mbarrier-bug3-gives-up).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.cuda_emu.build import missing_tools, sanitizer_env
from tests.cuda_emu.warp_cases import CASES, WarpCase

ROOT_DIR = Path(__file__).resolve().parents[1]

_missing = missing_tools()
pytestmark = pytest.mark.skipif(_missing is not None, reason=f"cannot emulate: {_missing}")


def _run(tmp_path: Path, case: WarpCase) -> tuple[list[np.ndarray] | None, str]:
    """(the kernel's arrays after the launch, or None if it aborted; its stderr)."""
    src, dst = tmp_path / "in.npz", tmp_path / "out.npz"
    named: dict[str, Any] = {f"a{i}": a for i, a in enumerate(case.arrays)}
    np.savez(src, **named)
    done = subprocess.run(
        [sys.executable, "-m", "tests.cuda_emu.warp_run", case.kernel, str(case.bug), str(src),
         str(dst), *map(str, case.smem), str(case.threads), str(case.schedule)],
        capture_output=True, text=True, cwd=ROOT_DIR, env=sanitizer_env(), timeout=600)
    if done.returncode != 0:
        return None, done.stderr
    out = np.load(dst)
    return [out[f"a{i}"] for i in range(len(case.arrays))], done.stderr


def _check(tmp_path: Path, case: WarpCase) -> None:
    out, err = _run(tmp_path, case)
    if case.aborts is not None:
        assert out is None and case.aborts in err, err
        return
    assert out is not None, err
    assert case.holds is not None and case.holds(out)


_DIVERGENT = "mma_k16-divergent"


@pytest.mark.parametrize("case_id", [c for c in CASES if c != _DIVERGENT])
def test_warp_instruction_against_its_model(tmp_path: Path, case_id: str) -> None:
    """Each case of tests/cuda_emu/warp_cases.py (the table above) gives its model's answer
    (or, with a bug, not), or aborts with the emulator's report."""
    _check(tmp_path, CASES[case_id])


# Regression guard for a divergent warp at mma.sync: lanes 16..31 skipping it must not pass.
def test_mma_divergence_is_detected(tmp_path: Path) -> None:
    _check(tmp_path, CASES[_DIVERGENT])


_SPIN = """
import sys, time
import numpy as np
from tests.cuda_emu.kernel import EmulatedKernel
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
from tests.cuda_emu.kernel import EmulatedKernel
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
