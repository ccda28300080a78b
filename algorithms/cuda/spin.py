"""A GPU busy-wait (kernels/spin.cu): the head start that lets the host enqueue a call's
launches before the GPU reaches them (CudaRuntime.device_ms)."""

from __future__ import annotations

import numpy as np

from algorithms.cuda._loader import get_kernel

KERNEL_FILE = "spin.cu"
_NAME = "spin"


def shipped_kernels() -> tuple[str, ...]:
    """Every name expression this module can ask for."""
    return (_NAME,)


def spin(ns: int) -> None:
    """Enqueue one thread that keeps the current stream busy for `ns` nanoseconds."""
    get_kernel(KERNEL_FILE, _NAME)((1,), (32,), (np.uint64(ns),))
