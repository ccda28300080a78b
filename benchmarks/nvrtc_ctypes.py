"""NVRTC on a machine without CuPy: the nvidia-cuda-nvrtc wheel's library through ctypes,
with the few calls of CuPy's `cupy_backends.cuda.libs.nvrtc` that compiling a kernel here
needs (tests/test_kernels_compile.py, benchmarks/bench_compile.py). The same compiler the
GPU's CuPy calls, so a source it refuses fails here, not in a GPU session, and its compile
times are this CPU's.
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path
from typing import Any


class CtypesNvrtc:
    """The NVRTC calls below, named as CuPy's module names them, from one libnvrtc. ctypes
    releases the GIL during each call, as CuPy's compileProgram does."""

    #: What a refused compile raises (CuPy's module names its own class so).
    NVRTCError = RuntimeError

    def __init__(self, path: str) -> None:
        self.lib = ctypes.CDLL(path)
        self.lib.nvrtcGetErrorString.restype = ctypes.c_char_p

    def _check(self, rc: int) -> None:
        if rc != 0:
            raise RuntimeError(self.lib.nvrtcGetErrorString(rc).decode())

    def createProgram(self, src: str, name: str, headers: Any, includes: Any) -> Any:
        prog = ctypes.c_void_p()
        self._check(self.lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(),
                                                name.encode(), 0, None, None))
        return prog

    def addNameExpression(self, prog: Any, name: str) -> None:
        self._check(self.lib.nvrtcAddNameExpression(prog, name.encode()))

    def compileProgram(self, prog: Any, options: tuple[str, ...]) -> None:
        args = (ctypes.c_char_p * len(options))(*(o.encode() for o in options))
        self._check(self.lib.nvrtcCompileProgram(prog, len(options), args))

    def getProgramLog(self, prog: Any) -> str:
        size = ctypes.c_size_t()
        self._check(self.lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)))
        log = ctypes.create_string_buffer(size.value)
        self._check(self.lib.nvrtcGetProgramLog(prog, log))
        return log.value.decode()

    def destroyProgram(self, prog: Any) -> None:
        self._check(self.lib.nvrtcDestroyProgram(ctypes.byref(prog)))

    def getCUBIN(self, prog: Any) -> bytes:
        size = ctypes.c_size_t()
        self._check(self.lib.nvrtcGetCUBINSize(prog, ctypes.byref(size)))
        cubin = ctypes.create_string_buffer(size.value)
        self._check(self.lib.nvrtcGetCUBIN(prog, cubin))
        return cubin.raw

    def getLoweredName(self, prog: Any, name: str) -> str:
        lowered = ctypes.c_char_p()
        self._check(self.lib.nvrtcGetLoweredName(prog, name.encode(), ctypes.byref(lowered)))
        return (lowered.value or b"").decode()


def load_nvrtc() -> Any:
    """CuPy's NVRTC module where CuPy loads it, else the wheel's library through CtypesNvrtc,
    else None."""
    try:
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
        return nvrtc
    except Exception:  # no CuPy (or no libnvrtc for it): the wheel's, if installed
        pass
    for site in sys.path:
        found = sorted(Path(site).glob("nvidia/cu*/lib/libnvrtc.so.*"))
        if found:
            return CtypesNvrtc(str(found[-1]))
    return None
