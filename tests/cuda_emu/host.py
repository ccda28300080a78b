"""Host stand-ins for the GPU side of algorithms/cuda, for tests without a GPU.

NumPy arrays posing as CuPy arrays (`.data.ptr` is their host address), cuBLAS's
strided-batched GEMM on raw addresses, and numpy.fft in place of a cuFFT plan. Each checks
what the real library would reject or fault on: misaligned operands, leading dimensions,
batch counts, transform sizes.
"""

from __future__ import annotations

import ctypes
from types import SimpleNamespace
from typing import Any

import numpy as np

from algorithms.cuda import fft

#: Largest batch count one cuBLAS call is given (see algorithms/cuda/_cublas.py).
MAX_GEMM_BATCH = 63 * 1024


class DeviceArray(np.ndarray):
    """A host array posing as a CuPy array: `.data.ptr` is its address."""

    @property
    def data(self) -> SimpleNamespace:  # type: ignore[override]
        return SimpleNamespace(ptr=self.__array_interface__["data"][0])


def dev(a: np.ndarray) -> DeviceArray:
    """A contiguous copy of `a` as a DeviceArray."""
    return np.ascontiguousarray(a).copy().view(DeviceArray)


def at(ptr: int, count: int, dtype: Any) -> np.ndarray:
    """A writable view of `count` elements of `dtype` at a host address the test owns."""
    dt = np.dtype(dtype)
    buf = (ctypes.c_char * (count * dt.itemsize)).from_address(ptr)
    return np.frombuffer(buf, dtype=dt)


def dev_at(a: np.ndarray, misalign: int) -> DeviceArray:
    """A C-contiguous DeviceArray copy of `a` whose address is `misalign` bytes past a
    256-byte boundary (a sliced caller buffer; CuPy's own allocations have misalign 0)."""
    a = np.ascontiguousarray(a)
    raw = np.zeros(a.nbytes + 512, np.uint8)
    start = (-raw.__array_interface__["data"][0]) % 256 + misalign
    out = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out.view(DeviceArray)


def tf32_truncate(a: np.ndarray) -> np.ndarray:
    """float32 values with their low 13 mantissa bits cleared (TF32 read by truncation)."""
    bits = np.ascontiguousarray(a, np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
    return bits.view(np.float32)


def fake_gemm(dtype: str, transa: int, transb: int, m: int, n: int, k: int,
              a: int, lda: int, sa: int, b: int, ldb: int, sb: int,
              c: int, ldc: int, sc: int, batch: int, accumulate: bool = False,
              float32_c: bool = False, tf32: bool = False) -> None:
    """cuBLAS strided-batched GEMM semantics (column-major, beta 0 or 1) on raw host addresses.

    `tf32` (CUBLAS_COMPUTE_32F_FAST_TF32) truncates both operands to TF32 first: what the
    tensor cores do with FP32 operands nobody rounded, the worst cuBLAS may do.
    """
    dt = np.dtype(dtype)
    item = dt.itemsize
    assert not float32_c or dtype == "float16", "a float32 C needs float16 operands (GemmEx)"
    assert not tf32 or dtype == "float32", "TF32 compute needs float32 operands"
    c_dt = np.dtype(np.float32) if float32_c else dt
    assert 1 <= batch <= MAX_GEMM_BATCH, f"cuBLAS batch count {batch}"
    for ptr, size in ((a, item), (b, item), (c, c_dt.itemsize)):
        assert ptr % size == 0, f"cuBLAS {dtype} operand at {ptr:#x} is misaligned"

    def mat(ptr: int, rows: int, cols: int, ld: int, mdt: np.dtype = dt) -> np.ndarray:
        assert ld >= max(1, rows), f"leading dimension {ld} < rows {rows}"
        base = at(ptr, ld * (cols - 1) + rows, mdt)
        return np.lib.stride_tricks.as_strided(base, (rows, cols),
                                               (mdt.itemsize, ld * mdt.itemsize))

    def op(mtx: np.ndarray, trans: int) -> np.ndarray:
        return mtx if trans == 0 else (mtx.T if trans == 1 else mtx.conj().T)

    def read(mtx: np.ndarray) -> np.ndarray:
        return tf32_truncate(mtx) if tf32 else mtx

    for i in range(batch):
        a_m = read(mat(a + i * sa * item, *((m, k) if transa == 0 else (k, m)), lda))
        b_m = read(mat(b + i * sb * item, *((k, n) if transb == 0 else (n, k)), ldb))
        c_m = mat(c + i * sc * c_dt.itemsize, m, n, ldc, c_dt)
        prod = op(a_m, transa).astype(np.complex128 if dt.kind == "c" else np.float64) @ op(
            b_m, transb)
        # beta = 1 reads C in its storage type, as cuBLAS does.
        c_m[...] = (prod + c_m if accumulate else prod).astype(c_dt)


class FakePlan:
    """numpy.fft in place of a cuFFT plan (inverse unnormalised, like cuFFT)."""

    def __init__(self, fft_type: int, batch: int, fh: int, fw: int) -> None:
        self.forward = fft_type in (fft.CUFFT_R2C, fft.CUFFT_D2Z)
        self.double = fft_type in (fft.CUFFT_D2Z, fft.CUFFT_Z2D)
        self.batch, self.fh, self.fw = batch, fh, fw

    def fft(self, a: Any, out: Any, direction: int) -> None:
        half = self.fw // 2 + 1
        real = np.float64 if self.double else np.float32
        cplx = np.complex128 if self.double else np.complex64
        assert a.dtype == (real if self.forward else cplx)
        assert out.dtype == (cplx if self.forward else real)
        for arr in (a, out):  # cuFFT needs data aligned to its (complex) element
            assert arr.data.ptr % np.dtype(cplx).itemsize == 0, "misaligned cuFFT buffer"
        assert self.fh >= 2 and self.fw >= 2, "no transform side of 1"
        if self.forward:
            assert direction == fft.CUFFT_FORWARD
            spectrum = np.fft.rfft2(a.reshape(self.batch, self.fh, self.fw))
            out.reshape(self.batch, self.fh, half)[...] = spectrum
        else:
            assert direction == fft.CUFFT_INVERSE
            planes = np.fft.irfft2(a.reshape(self.batch, self.fh, half), s=(self.fh, self.fw))
            out.reshape(self.batch, self.fh, self.fw)[...] = planes * (self.fh * self.fw)
