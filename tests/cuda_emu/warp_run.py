"""Run one kernel of tests/cuda_emu/warp_kernels.cu on one warp, in a sanitized process.

`python -m tests.cuda_emu.warp_run KERNEL BUG IN.npz OUT.npz`: the arrays of IN.npz, in the
kernel's parameter order (named a0, a1, ...), become 256-byte aligned device arrays; after
the launch every one of them is written to OUT.npz under the same name. An emulator or
sanitizer report aborts the process (tests/test_cuda_emu_warp.py reads its stderr).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

from tests.cuda_emu.build import EmulatedKernel
from tests.cuda_emu.host import dev_at

#: The warp kernels' source, an absolute path (build.translate takes one).
WARP_KERNELS = str(Path(__file__).resolve().parent / "warp_kernels.cu")


def main(kernel: str, bug: str, src: str, dst: str) -> None:
    """Launch `kernel` once with one 32-thread block and save its arrays."""
    inputs = np.load(src)
    arrays = [dev_at(inputs[f"a{i}"], 0) for i in range(len(inputs.files))]
    EmulatedKernel(WARP_KERNELS, kernel)((1,), (32,), (*arrays, np.int32(int(bug))))
    named: dict[str, Any] = {f"a{i}": np.asarray(a) for i, a in enumerate(arrays)}
    np.savez(dst, **named)


if __name__ == "__main__":
    main(*sys.argv[1:5])
