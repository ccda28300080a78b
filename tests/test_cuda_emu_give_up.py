"""The warp-specialized wgmma kernel gives up instead of hanging (kernels/wgmma.cuh
MBARRIER_GIVE_UP_NS).

A deadlock hangs a GPU kernel, and with it the process and a tuning run, for good. The
"-ws" kernel's mbarrier waits time out instead: here a deadlock is injected into a copy of
the kernel (`full` expecting one producer arrival more than it gets), and the emulator lets
time pass where the block deadlocks (runtime.h kExpireWaits). Both roles must give up, and
y come out NaN (written NaN: it starts as zeros), in both thread schedules. The same launch
of the shipped kernel gives the reference, so the NaN are the give-up's. Shown to bite:
without the give-up in mbarrier_wait the patched run aborts on the deadlock; a consumer that
gives up without writing NaN leaves y's zeros.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.cuda_emu.build import missing_tools, sanitizer_env
from tests.cuda_emu.warp_cases import EXPIRE_WAITS
from tests.precision import tolerance_for

ROOT_DIR = Path(__file__).resolve().parents[1]
#: The injected deadlock: every stage's `full` barrier expects one arrival more.
_SHIPPED = "mbarrier_init(bars + 8 * st, PRODUCERS);"
_DEADLOCK = "mbarrier_init(bars + 8 * st, PRODUCERS + 1);"
#: Nine K-steps of 64 channels and taps: past the tile's four stages, so that the producers
#: wait on `empty` too (from step 4 on) and give up there.
_PROBLEM = dict(n=1, c=64, h=4, w=4, k=40, r=3, s=3, pad=1)
_CONFIG = "128x128x64-s4-ws"

_missing = missing_tools()
pytestmark = pytest.mark.skipif(_missing is not None, reason=f"cannot emulate: {_missing}")


def child(kernel_file: str, schedule: int) -> None:
    """Run _CONFIG with the wgmma kernels of `kernel_file` (an absolute path, or "" for the
    shipped file) under `schedule`, and print y's NaN count and its error as JSON."""
    from algorithms.cuda import implicit_gemm_wgmma
    from algorithms.reference import reference, relative_error
    from tests.cuda_emu import cases
    from tests.cuda_emu.host import dev
    from tests.cuda_emu.kernel import EmulatedFunction, EmulatedKernel
    from tests.precision import make_problem

    cases.install()
    if kernel_file:
        def routed(filename: str, name: str) -> EmulatedKernel:
            if filename == "implicit_gemm_wgmma.cu":
                return EmulatedFunction(kernel_file, name)
            return cases._kernel(filename, name)

        implicit_gemm_wgmma.get_kernel = routed  # type: ignore[assignment]
    algorithm = implicit_gemm_wgmma.ImplicitGemmWgmmaCuda()
    problem = make_problem(dtype="float16", **_PROBLEM)  # type: ignore[arg-type]
    assert _CONFIG in algorithm.configs(problem)
    rng = np.random.default_rng()
    x_shape, w_shape, y_shape = problem.operand_shapes
    x = rng.standard_normal(x_shape).astype(np.float16)
    w = rng.standard_normal(w_shape).astype(np.float16)
    y = dev(np.zeros(y_shape, np.float16))
    nbytes = algorithm.workspace_bytes(problem, _CONFIG)
    workspace = dev(np.full(nbytes, 0xFF, np.uint8)) if nbytes else None
    EmulatedKernel.schedule = (schedule, 0)
    algorithm.run(dev(x), dev(w), y, workspace, problem, _CONFIG)
    out = np.array(y).astype(np.float64)
    ref = reference(x.astype(np.float64), w.astype(np.float64), problem)
    print(json.dumps({"nan": int(np.isnan(out).sum()), "size": int(out.size),
                      "error": None if np.isnan(out).any() else relative_error(out, ref)}))


def _run(kernel_file: str, schedule: int) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from tests.test_cuda_emu_give_up import child; "
         "child(sys.argv[1], int(sys.argv[2]))", kernel_file, str(schedule)],
        capture_output=True, text=True, cwd=ROOT_DIR, env=sanitizer_env(), timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return result


@pytest.mark.parametrize("schedule", [EXPIRE_WAITS, EXPIRE_WAITS | 1])  # forward, reverse
def test_a_deadlocked_warp_specialized_tile_gives_up_with_nan(tmp_path: Path,
                                                                schedule: int) -> None:
    source = (ROOT_DIR / "kernels" / "implicit_gemm_wgmma.cu").read_text(encoding="utf-8")
    assert source.count(_SHIPPED) == 1, "the -ws kernel's full-barrier init moved: update me"
    patched = tmp_path / "implicit_gemm_wgmma.cu"
    patched.write_text(source.replace(_SHIPPED, _DEADLOCK), encoding="utf-8")
    gave_up = _run(str(patched), schedule)
    assert gave_up["nan"] == gave_up["size"], gave_up


def test_the_shipped_tile_under_the_same_schedule_gives_the_product() -> None:
    shipped = _run("", EXPIRE_WAITS)
    limit = tolerance_for("float16", "fp32", "implicit_gemm_wgmma")
    assert shipped["nan"] == 0 and shipped["error"] is not None and shipped["error"] <= limit, \
        shipped
