"""The warp instructions' models on the GPU itself: tests/cuda_emu/warp_cases.py's cases,
which the emulator passes (tests/test_cuda_emu_warp.py), run on hardware with the same
kernels and the same NumPy oracle.

Every emulated kernel test rests on the emulator's models of mma.sync, ldmatrix, cp.async,
wgmma (both operands in shared memory, or A in registers: the NCHW tiles' form), mbarriers
(and a deadlocked wait's give-up after wgmma.cuh's MBARRIER_GIVE_UP_NS: that launch ends in
about two seconds) and the shared-memory opt-in. A fragment layout that the emulator and its
oracle got wrong together would pass on the CPU and give wrong numbers only here; this file
says which instruction.
The injected bugs that give wrong numbers must disagree with the model here too; cases whose
outcome the PTX ISA leaves undefined (races, faults) are the emulator's alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from algorithms.cuda._loader import MAX_DYNAMIC_SHARED_SIZE_BYTES, NVRTC_OPTIONS, paste_headers
from tests.cuda_emu.warp_cases import CASES, WARP_ARCH, WARP_KERNELS, WarpCase

_ON_GPU = [name for name, case in CASES.items() if case.gpu != "undefined"]


def _require_sm90() -> None:
    import cupy

    capability = str(cupy.cuda.Device().compute_capability)
    if capability != "90":
        pytest.skip(f"the warp kernels hold wgmma ({WARP_ARCH} only); this GPU is "
                    f"sm_{capability}")


_compiled: dict[str, Any] = {}


def _kernel(name: str) -> Any:
    """`name` of warp_kernels.cu compiled by NVRTC for this GPU, once per process."""
    if name not in _compiled:
        from cupy.cuda import function

        from algorithms.cuda._binaries import nvrtc_compile

        source = paste_headers(Path(WARP_KERNELS).read_text(encoding="utf-8"))
        lowered, cubin = nvrtc_compile(source, "warp_kernels.cu", name,
                                       (*NVRTC_OPTIONS, f"-arch={WARP_ARCH}"))
        module = function.Module()
        module.load(cubin)
        _compiled[name] = module.get_function(lowered)  # the Function holds its Module
    return _compiled[name]


def _launch(case: WarpCase) -> list[np.ndarray]:
    import cupy
    from cupy.cuda import driver

    _require_sm90()
    kernel = _kernel(case.kernel)
    smem, opt_in = case.smem
    # Set for every case, down as well as up: the attribute stays with the kernel, and a case
    # that must be refused would pass on an earlier case's larger opt-in.
    driver.funcSetAttribute(kernel.ptr, MAX_DYNAMIC_SHARED_SIZE_BYTES, opt_in)
    arrays = [cupy.asarray(a) for a in case.arrays]
    kernel((1,), (case.threads,), (*arrays, np.int32(case.bug)), shared_mem=smem)
    cupy.cuda.Device().synchronize()
    return [cupy.asnumpy(a) for a in arrays]


@pytest.mark.parametrize("case_id", _ON_GPU)
def test_warp_instruction_on_the_gpu_agrees_with_its_model(case_id: str) -> None:
    case = CASES[case_id]
    if case.gpu == "refused":  # more shared memory than the kernel opted in to
        # An attribute, not a module: CuPy 14's cupy/cuda/__init__.py imports driver from
        # cupy_backends, so `from cupy.cuda.driver import ...` is a ModuleNotFoundError.
        from cupy.cuda import driver

        with pytest.raises(driver.CUDADriverError):
            _launch(case)
        return
    assert case.holds is not None, case_id
    assert case.holds(_launch(case)), (
        f"{case_id}: the GPU disagrees with the model the emulator follows"
        if case.bug == 0 else f"{case_id}: the injected bug went unseen on the GPU")
