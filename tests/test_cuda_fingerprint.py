"""The CUDA fingerprint's library versions, read from CuPy's modules where CuPy keeps them
(stand-in modules: no GPU here; tests/gpu/test_cuda_algorithms.py reads the real ones)."""

from __future__ import annotations

import sys
import types
from contextlib import nullcontext

import pytest

from algorithms.cuda.runtime import CudaRuntime


def _module(name: str, **attrs: object) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    return module


# Bug: the versions were imported as cupy.cuda.cublas and cupy.cuda.nvrtc, which are not
# submodules in CuPy 13-14 (attributes of cupy.cuda, from cupy_backends): both were always
# None, and the GPU test asserting them would have failed.
def test_library_versions_come_from_where_cupy_keeps_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    handles: list[int] = []

    def cublas_version(handle: int) -> int:
        handles.append(handle)
        return 120805

    cublas = _module("cupy_backends.cuda.libs.cublas", getVersion=cublas_version)
    nvrtc = _module("cupy_backends.cuda.libs.nvrtc", getVersion=lambda: (12, 8))
    cufft = _module("cupy.cuda.cufft", getVersion=lambda: 11303)
    device = _module("cupy.cuda.device", get_cublas_handle=lambda: 77)
    cuda = _module("cupy.cuda", cufft=cufft, device=device)  # no cublas, no nvrtc
    cupy = _module("cupy", cuda=cuda)
    libs = _module("cupy_backends.cuda.libs", cublas=cublas, nvrtc=nvrtc)
    for name, module in {"cupy": cupy, "cupy.cuda": cuda, "cupy.cuda.cufft": cufft,
                         "cupy_backends": _module("cupy_backends"),
                         "cupy_backends.cuda": _module("cupy_backends.cuda"),
                         "cupy_backends.cuda.libs": libs,
                         "cupy_backends.cuda.libs.cublas": cublas,
                         "cupy_backends.cuda.libs.nvrtc": nvrtc}.items():
        monkeypatch.setitem(sys.modules, name, module)
    runtime = CudaRuntime.__new__(CudaRuntime)
    runtime._cupy, runtime._dev = cupy, nullcontext()
    assert runtime._libraries() == {"cublas": 120805, "cufft": 11303, "nvrtc": "12.8"}
    assert handles == [77]
    # A library that cannot say is None, the others still read.
    monkeypatch.delitem(sys.modules, "cupy.cuda.cufft")
    del cuda.cufft
    assert runtime._libraries() == {"cublas": 120805, "cufft": None, "nvrtc": "12.8"}


# Mutation gap: the CUDA fingerprint names the GPU model, its architecture (major.minor), SMs,
# memory, L2, the driver, runtime, CuPy and library versions and the GEMM path: each one
# changes measured times, so a change of any gives another fingerprint.
def test_every_field_that_changes_gpu_timings_is_in_the_fingerprint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tuner.devices import fingerprint_of

    driver = {"version": 12080}
    runtime_api = _module("cupy.cuda.runtime", driverGetVersion=lambda: driver["version"],
                          runtimeGetVersion=lambda: 12060)
    cupy = _module("cupy", cuda=_module("cupy.cuda", runtime=runtime_api), __version__="13.3.0")
    runtime = CudaRuntime.__new__(CudaRuntime)
    runtime._cupy = cupy
    runtime._props = {"name": b"NVIDIA H100 80GB HBM3", "major": 9, "minor": 0,
                      "multiProcessorCount": 132, "totalGlobalMem": 85 << 30,
                      "l2CacheSize": 50 << 20}
    libraries = {"cublas": 120805, "cufft": 11303, "nvrtc": "12.8"}
    monkeypatch.setattr(CudaRuntime, "_libraries", lambda self: dict(libraries))
    monkeypatch.delenv("CONVTUNE_CUBLASLT", raising=False)
    info = runtime.fingerprint()
    assert info == {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3", "arch": "9.0",
                    "units": 132, "memory_bytes": 85 << 30, "l2_bytes": 50 << 20,
                    "driver": 12080, "runtime": 12060, "cupy": "13.3.0", **libraries,
                    "gemm": "cublas"}
    seen = {fingerprint_of(info)}
    changes = [("props", "minor", 9), ("props", "multiProcessorCount", 114),
               ("props", "l2CacheSize", 60 << 20), ("driver", "version", 12090),
               ("libraries", "cufft", 11304), ("libraries", "nvrtc", "12.9")]
    for where, key, value in changes:
        table = {"props": runtime._props, "driver": driver, "libraries": libraries}[where]
        table[key] = value
        seen.add(fingerprint_of(runtime.fingerprint()))
    monkeypatch.setenv("CONVTUNE_CUBLASLT", "1")
    seen.add(fingerprint_of(runtime.fingerprint()))
    assert len(seen) == len(changes) + 2
