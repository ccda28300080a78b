"""Run one kernel of tests/cuda_emu/warp_kernels.cu on one block, in a sanitized process.

`python -m tests.cuda_emu.warp_run KERNEL BUG IN.npz OUT.npz [SMEM OPT_IN [THREADS
[SCHEDULE]]]`: the arrays of IN.npz, in the kernel's parameter order (named a0, a1, ...),
become 256-byte aligned device arrays; the launch takes one block of THREADS (default 32: a
warp), run in SCHEDULE's order (runtime.h: 0 forward, the default, 1 reverse), and SMEM
bytes of dynamic shared memory, with the kernel's max_dynamic_shared_size_bytes set to
OPT_IN (default 0 and 48 KiB); after the launch every array is written to OUT.npz under the
same name. An emulator or sanitizer report aborts the process (tests/test_cuda_emu_warp.py
reads its stderr).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from tests.cuda_emu.host import dev_at
from tests.cuda_emu.kernel import EmulatedKernel
from tests.cuda_emu.warp_cases import WARP_INSTANCES, WARP_KERNELS


def main(kernel: str, bug: str, src: str, dst: str, smem: str = "0",
         opt_in: str = str(48 * 1024), threads: str = "32", schedule: str = "0") -> None:
    """Launch `kernel` once with one block of `threads` (threads in `schedule`'s order:
    runtime.h) and save its arrays."""
    inputs = np.load(src)
    arrays = [dev_at(inputs[f"a{i}"], 0) for i in range(len(inputs.files))]
    EmulatedKernel.schedule = (int(schedule), 0)
    launcher = EmulatedKernel(WARP_KERNELS, kernel, WARP_INSTANCES)
    launcher.max_dynamic_shared_size_bytes = int(opt_in)
    launcher((1,), (int(threads),), (*arrays, np.int32(int(bug))), shared_mem=int(smem))
    named: dict[str, Any] = {f"a{i}": np.asarray(a) for i, a in enumerate(arrays)}
    np.savez(dst, **named)


if __name__ == "__main__":
    main(*sys.argv[1:9])
