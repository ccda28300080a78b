"""CPU check of the CUDA backend's index arithmetic, without a GPU.

The real host code of each GPU algorithm (`run`: grids, kernel argument order, fast-division
constants, workspace layout, cuBLAS pointers, strides and leading dimensions) is driven with
NumPy stand-ins: arrays whose `.data.ptr` is their host address, kernels replaced by NumPy
transcriptions of kernels/*.cu that follow the same per-thread index formulas (the
implicit-GEMM one block by block, tile by tile, with every shared-memory slot and output
element checked to be written exactly once), cuBLAS by a column-major strided-batched GEMM
on raw addresses and cuFFT by numpy.fft. The stand-ins also check alignment (every kernel
pointer aligned to its element type, every float4 epilogue store to 16 bytes, cuBLAS and
cuFFT operands to their element), fed with buffers only one element past a 256-byte boundary;
a launch-only stand-in checks grid, block and shared-memory limits on problems too big to
emulate. What this cannot see: the C++ transcription
itself, races, and anything about real GPU execution (tests/gpu covers that on a GPU).
"""

from __future__ import annotations

import ctypes
import itertools
import re
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from algorithms.base import Algorithm
from algorithms.cuda import direct, fft, im2col_gemm, implicit_gemm
from algorithms.cuda._loader import fastdiv
from algorithms.problem import DTYPES, ConvProblem
from algorithms.reference import reference_conv, relative_error, tolerance

NP_TYPES: dict[str, Any] = {
    "half_t": np.float16, "float": np.float32, "double": np.float64,
    "float2": np.complex64, "double2": np.complex128,
}


# --- fake device memory -------------------------------------------------------------------
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


#: alignof() of each kernel element type on the GPU (float2/double2 are 8/16-byte vectors).
ALIGN: dict[str, int] = {"half_t": 2, "float": 4, "double": 8, "float2": 8, "double2": 16}

#: Facts the emulated launches record for the tests to check (cleared per test).
LAUNCHES: list[dict[str, Any]] = []


def typed(arr: Any, ctype: str, count: int) -> np.ndarray:
    """What a kernel's `ctype*` parameter sees of `arr` (the first `count` elements)."""
    assert count * np.dtype(NP_TYPES[ctype]).itemsize <= arr.nbytes, "kernel reads past buffer"
    assert arr.data.ptr % ALIGN[ctype] == 0, f"misaligned {ctype}* kernel argument"
    return at(arr.data.ptr, count, NP_TYPES[ctype])


def fdiv(n: Any, mul: Any, shift: Any) -> np.ndarray:
    """kernels/common.cuh fast_div, in 32-bit unsigned arithmetic."""
    un = np.asarray(n, dtype=np.int64)
    assert (un >= 0).all() and (un < 2**31).all(), "fast_div needs 0 <= n < 2**31"
    u = un.astype(np.uint64)
    hi = (u * np.uint64(int(mul))) >> np.uint64(32)
    return (((hi + u) & np.uint64(0xFFFFFFFF)) >> np.uint64(int(shift))).astype(np.int64)


def i32(v: Any) -> np.ndarray:
    """Assert a kernel's int arithmetic stayed in 32 bits."""
    arr = np.asarray(v, dtype=np.int64)
    assert (arr >= -(2**31)).all() and (arr < 2**31).all(), "int32 overflow"
    return arr


def ints(args: tuple[Any, ...]) -> list[int]:
    """Kernel scalar arguments as Python ints (they must be numpy 32-bit scalars)."""
    for a in args:
        assert isinstance(a, (np.int32, np.uint32)), f"kernel argument {a!r} is not 32-bit"
    return [int(a) for a in args]


# --- kernel transcriptions ---------------------------------------------------------------------
def emu_im2col(t: str) -> Callable[..., None]:
    def kernel(grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...],
               shared_mem: int = 0) -> None:
        x, col = args[:2]
        (n, c, h, w, _k, r, s, p_out, q_out, ph, pw, sh, sw, dh, dw, _g, n0, total,
         pqm, pqs, qm, qs, rsm, rss, sm, ss) = ints(args[2:])
        assert block == (256,) and grid[0] >= 1
        i = np.arange(total)
        row = fdiv(i, pqm, pqs)
        pq = i - row * p_out * q_out
        plane = fdiv(row, rsm, rss)
        rs = row - plane * r * s
        p = fdiv(pq, qm, qs)
        q = pq - p * q_out
        rr = fdiv(rs, sm, ss)
        ss_ = rs - rr * s
        ih = p * sh - ph + rr * dh
        iw = q * sw - pw + ss_ * dw
        ok = (ih >= 0) & (ih < h) & (iw >= 0) & (iw < w)
        xn = typed(x, t, n * c * h * w)[n0 * c * h * w:]
        src = np.where(ok, (plane * h + ih) * w + iw, 0)
        typed(col, t, total)[:] = np.where(ok, xn[src].astype(np.float64), 0)
    return kernel


def emu_direct(t: str, th: int, tw: int, kpt: int) -> Callable[..., None]:
    def kernel(grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...],
               shared_mem: int = 0) -> None:
        x, w, y = args[:3]
        (n, c, h, wd, k, r, s, p_out, q_out, ph, pw, sh, sw, dh, dw, g_, tiles_w,
         cb) = ints(args[3:])
        acc_t = np.float64 if t == "double" else np.float32
        cg, kg, rs_n = c // g_, k // g_, r * s
        in_h = (th - 1) * sh + (r - 1) * dh + 1
        in_w = (tw - 1) * sw + (s - 1) * dw + 1
        in_tile = in_h * in_w
        assert block == (tw, th, 1)
        assert shared_mem >= cb * (in_tile + kpt * rs_n) * np.dtype(acc_t).itemsize
        assert shared_mem <= 48 * 1024 and cb >= 1
        kblocks = -(-kg // kpt)
        assert grid[1] == g_ * kblocks and grid[2] == n
        assert grid[0] == tiles_w * -(-p_out // th) and tiles_w == -(-q_out // tw)
        xf = typed(x, t, n * c * h * wd).astype(acc_t)
        wf = typed(w, t, k * cg * rs_n).astype(acc_t)
        yf = typed(y, t, n * k * p_out * q_out)
        ty, tx = np.divmod(np.arange(th * tw), tw)
        for bz in range(grid[2]):
            for by in range(grid[1]):
                g, kb = divmod(by, kblocks)
                k0 = kb * kpt
                for bx in range(grid[0]):
                    tile_p, tile_q = divmod(bx, tiles_w)
                    p0, q0 = tile_p * th, tile_q * tw
                    ih0, iw0 = p0 * sh - ph, q0 * sw - pw
                    acc = np.zeros((th * tw, kpt), acc_t)
                    for c0 in range(0, cg, cb):
                        cn = min(cb, cg - c0)
                        i = np.arange(cn * in_tile)
                        cc, rem = np.divmod(i, in_tile)
                        a, b = np.divmod(rem, in_w)
                        ih, iw = ih0 + a, iw0 + b
                        ok = (ih >= 0) & (ih < h) & (iw >= 0) & (iw < wd)
                        src = ((bz * c + g * cg + c0 + cc) * h + ih) * wd + iw
                        s_in = np.where(ok, xf[np.where(ok, src, 0)], 0)
                        i = np.arange(cn * kpt * rs_n)
                        cc, rem = np.divmod(i, kpt * rs_n)
                        kk, rs = np.divmod(rem, rs_n)
                        ok = k0 + kk < kg
                        src = ((g * kg + k0 + kk) * cg + c0 + cc) * rs_n + rs
                        s_w = np.where(ok, wf[np.where(ok, src, 0)], 0)
                        for ci in range(cn):
                            base = ci * in_tile + ty * sh * in_w + tx * sw
                            for rr in range(r):
                                for s_ in range(s):
                                    v = s_in[base + rr * dh * in_w + s_ * dw]
                                    wv = s_w[ci * kpt * rs_n + np.arange(kpt) * rs_n + rr * s + s_]
                                    acc += v[:, None] * wv[None, :]
                    p, q = p0 + ty, q0 + tx
                    for kj in range(kpt):
                        ok = (p < p_out) & (q < q_out) & (k0 + kj < kg)
                        dst = ((bz * k + g * kg + k0 + kj) * p_out + p) * q_out + q
                        yf[dst[ok]] = acc[ok, kj]
    return kernel


def emu_implicit(t: str, bm: int, bn: int, bk: int, tm: int, tn: int) -> Callable[..., None]:
    def kernel(grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...],
               shared_mem: int = 0) -> None:
        x, w, y = args[:3]
        (n, c, h, wd, k, r, s, p_out, q_out, ph, pw, sh, sw, dh, dw, g_, vec_out,
         rsm, rss, sm, ss, pqm, pqs, qm, qs) = ints(args[3:])
        tx_n, ty_n = bn // tn, bm // tm
        threads = tx_n * ty_n
        a_stride = threads // bk
        a_loads = bm // a_stride
        b_tpr = threads // bk
        b_loads = bn // b_tpr
        cg, kg, rs_n = c // g_, k // g_, r * s
        crs, pq_n, hw = cg * rs_n, p_out * q_out, h * wd
        npq_n = n * pq_n
        mblocks = -(-kg // bm)
        assert block == (threads,)
        assert grid == (-(-npq_n // bn), g_ * mblocks, 1)
        xf = typed(x, t, n * c * hw).astype(np.float32)
        wf = typed(w, t, k * crs).astype(np.float32)
        yf = typed(y, t, n * k * pq_n)
        writes = np.zeros(yf.size, np.int64)
        vec_stores = 0
        tid = np.arange(threads)
        a_k, a_m = tid % bk, tid // bk
        b_k, b_c = tid // b_tpr, tid % b_tpr
        ty, tx = tid // tx_n, tid % tx_n
        ja, jb = np.arange(a_loads)[None, :], np.arange(b_loads)[None, :]
        rows = ((np.arange(tm) // 4)[None, :] * 4 * ty_n + ty[:, None] * 4
                + (np.arange(tm) % 4)[None, :])
        cols = ((np.arange(tn) // 4)[None, :] * 4 * tx_n + tx[:, None] * 4
                + (np.arange(tn) % 4)[None, :])
        for by in range(grid[1]):
            g = by // mblocks
            m0 = (by - g * mblocks) * bm
            for bx in range(grid[0]):
                n0 = bx * bn
                npq = n0 + b_c[:, None] + jb * b_tpr
                valid = npq < npq_n
                img = fdiv(np.where(valid, npq, 0), pqm, pqs)
                pq = npq - img * pq_n
                p = fdiv(np.where(valid, pq, 0), qm, qs)
                q = pq - p * q_out
                h0, w0 = p * sh - ph, q * sw - pw
                packed = ((h0.astype(np.uint32) << np.uint32(16))
                          | (w0.astype(np.uint32) & np.uint32(0xFFFF)))
                col_hw = np.where(valid, packed, np.uint32(0xC0000000)).astype(np.uint32)
                col_off = np.where(valid, i32((img * c + g * cg) * hw + h0 * wd + w0), 0)
                unpack_h = col_hw.view(np.int32).astype(np.int64) >> 16
                unpack_w = (col_hw & np.uint32(0xFFFF)).astype(np.uint16).view(np.int16)
                unpack_w = unpack_w.astype(np.int64)
                assert (unpack_h[valid] == h0[valid]).all() and (unpack_w[valid] == w0[valid]).all()
                acc = np.zeros((threads, tm, tn), np.float64)
                for k0 in range(0, crs, bk):
                    a_s = np.full((bk, bm), np.nan, np.float32)
                    b_s = np.full((bk, bn), np.nan, np.float32)
                    m = m0 + a_m[:, None] + ja * a_stride
                    ka = k0 + a_k[:, None]
                    ok = (m < kg) & (ka < crs)
                    src = i32(g * kg * crs + m * crs + ka)
                    a_val = np.where(ok, wf[np.where(ok, src, 0)], 0)
                    slot_k = np.broadcast_to(a_k[:, None], m.shape)
                    slot_m = a_m[:, None] + ja * a_stride
                    assert len(set(zip(slot_k.ravel(), slot_m.ravel(), strict=True))) == bk * bm
                    a_s[slot_k, slot_m] = a_val
                    kb = k0 + b_k
                    row_ok = kb < crs
                    cc = fdiv(kb, rsm, rss)
                    rs = kb - cc * rs_n
                    rr = fdiv(rs, sm, ss)
                    s_ = rs - rr * s
                    dr, ds = rr * dh, s_ * dw
                    row_off = cc * hw + dr * wd + ds
                    ih = unpack_h + dr[:, None]
                    iw = unpack_w + ds[:, None]
                    ok = (row_ok[:, None] & (ih.astype(np.uint32) < h)
                          & (iw.astype(np.uint32) < wd) & (ih >= 0) & (iw >= 0))
                    src = i32(np.where(ok, col_off + row_off[:, None], 0))
                    b_val = np.where(ok, xf[src], 0)
                    slot_k = np.broadcast_to(b_k[:, None], npq.shape)
                    slot_c = b_c[:, None] + jb * b_tpr
                    assert len(set(zip(slot_k.ravel(), slot_c.ravel(), strict=True))) == bk * bn
                    b_s[slot_k, slot_c] = b_val
                    assert not np.isnan(a_s).any() and not np.isnan(b_s).any()
                    acc += np.einsum("kti,ktj->tij", a_s[:, rows].astype(np.float64),
                                     b_s[:, cols].astype(np.float64))
                # Epilogue, both paths as in the kernel.
                for j4 in range(tn // 4):
                    col0 = n0 + j4 * 4 * tx_n + tx * 4
                    for jj in range(4):
                        vec = bool(vec_out) & (col0 + 3 < npq_n)
                        col = col0 + jj
                        ok_col = vec | (col < npq_n)
                        base_col = np.where(vec, col0, col)
                        img = fdiv(np.where(ok_col, base_col, 0), pqm, pqs)
                        pq = base_col - img * pq_n + np.where(vec, jj, 0)
                        for i in range(tm):
                            m = m0 + (i // 4) * 4 * ty_n + ty * 4 + (i % 4)
                            ok = ok_col & (m < kg)
                            dst = i32((img * k + g * kg) * pq_n + pq + m * pq_n)[ok]
                            yf[dst] = acc[ok, i, j4 * 4 + jj]
                            np.add.at(writes, dst, 1)
                            if t == "float" and jj == 0:
                                # store_float4 (st.global.v4.f32): a misaligned address is
                                # a hard CUDA error, so every vector store must be 16-aligned.
                                vdst = dst[vec[ok]]
                                addr = y.data.ptr + vdst * 4
                                assert (addr % 16 == 0).all(), "misaligned float4 store"
                                vec_stores += vdst.size
        assert (writes == 1).all(), "every output element must be written exactly once"
        LAUNCHES.append({"kernel": "implicit_gemm_conv", "vec_out": vec_out,
                         "vec_stores": vec_stores})
    return kernel


def emu_fft_pad(ts: str, td: str) -> Callable[..., None]:
    def kernel(grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...],
               shared_mem: int = 0) -> None:
        src, dst = args[:2]
        planes, h, w, fh, fw, oh, ow, dh, dw = ints(args[2:])
        i = np.arange(planes * fh * fw)
        plane, rem = np.divmod(i, fh * fw)
        a, b = np.divmod(rem, fw)
        da, db = a - oh, b - ow
        ok = (da >= 0) & (db >= 0) & (da % dh == 0) & (db % dw == 0)
        sa, sb = da // dh, db // dw
        ok &= (sa < h) & (sb < w)
        s = typed(src, ts, planes * h * w).astype(np.float64)
        typed(dst, td, i.size)[:] = np.where(ok, s[np.where(ok, (plane * h + sa) * w + sb, 0)], 0)
    return kernel


def emu_fft_transpose(tc: str) -> Callable[..., None]:
    def kernel(grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...],
               shared_mem: int = 0) -> None:
        src, dst = args[:2]
        rows, cols = ints(args[2:])
        assert block == (32, 8) and grid[0] * 32 >= cols and grid[1] * 32 >= rows
        m = typed(src, tc, rows * cols).reshape(rows, cols)
        typed(dst, tc, rows * cols)[:] = m.T.ravel()
    return kernel


def emu_fft_crop(ts: str, td: str) -> Callable[..., None]:
    def kernel(grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...],
               shared_mem: int = 0) -> None:
        z, y = args[:2]
        planes, p_out, q_out, fh, fw, sh, sw = ints(args[2:9])
        scale = args[9]
        assert isinstance(scale, NP_TYPES[ts])
        zz = typed(z, ts, planes * fh * fw).reshape(planes, fh, fw)
        out = zz[:, : (p_out - 1) * sh + 1 : sh, : (q_out - 1) * sw + 1 : sw] * scale
        typed(y, td, planes * p_out * q_out)[:] = out.ravel()
    return kernel


def fake_get_kernel(filename: str, name_expression: str) -> Callable[..., None]:
    """The NumPy transcription of a kernel template instance."""
    match = re.fullmatch(r"(\w+)<(.*)>", name_expression)
    assert match, name_expression
    name, targs = match.group(1), [a.strip() for a in match.group(2).split(",")]
    nums = [int(a) for a in targs[1:] if a.isdigit()]
    if name == "im2col":
        return emu_im2col(targs[0])
    if name == "direct_conv":
        return emu_direct(targs[0], *nums)
    if name == "implicit_gemm_conv":
        return emu_implicit(targs[0], *nums[:5])
    if name == "fft_pad":
        return emu_fft_pad(targs[0], targs[1])
    if name == "fft_transpose":
        return emu_fft_transpose(targs[0])
    if name == "fft_crop":
        return emu_fft_crop(targs[0], targs[1])
    raise AssertionError(f"no emulation for {name_expression}")


def fake_gemm(dtype: str, transa: int, transb: int, m: int, n: int, k: int,
              a: int, lda: int, sa: int, b: int, ldb: int, sb: int,
              c: int, ldc: int, sc: int, batch: int) -> None:
    """cuBLAS strided-batched GEMM semantics (column-major) on raw host addresses."""
    dt = np.dtype(dtype)
    item = dt.itemsize
    for ptr in (a, b, c):
        assert ptr % item == 0, f"cuBLAS {dtype} operand at {ptr:#x} is misaligned"

    def mat(ptr: int, rows: int, cols: int, ld: int) -> np.ndarray:
        assert ld >= max(1, rows), f"leading dimension {ld} < rows {rows}"
        base = at(ptr, ld * (cols - 1) + rows, dt)
        return np.lib.stride_tricks.as_strided(base, (rows, cols), (item, ld * item))

    def op(mtx: np.ndarray, trans: int) -> np.ndarray:
        return mtx if trans == 0 else (mtx.T if trans == 1 else mtx.conj().T)

    for i in range(batch):
        a_m = mat(a + i * sa * item, *((m, k) if transa == 0 else (k, m)), lda)
        b_m = mat(b + i * sb * item, *((k, n) if transb == 0 else (n, k)), ldb)
        c_m = mat(c + i * sc * item, m, n, ldc)
        prod = op(a_m, transa).astype(np.complex128 if dt.kind == "c" else np.float64) @ op(
            b_m, transb)
        c_m[...] = prod.astype(dt)


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


@pytest.fixture
def emulated(monkeypatch: pytest.MonkeyPatch) -> None:
    """Route every GPU library call of the four modules to the NumPy stand-ins."""
    LAUNCHES.clear()
    for module in (direct, im2col_gemm, implicit_gemm, fft):
        monkeypatch.setattr(module, "get_kernel", fake_get_kernel)
    monkeypatch.setattr(im2col_gemm, "gemm_strided_batched", fake_gemm)
    monkeypatch.setattr(fft, "gemm_strided_batched", fake_gemm)
    monkeypatch.setattr(fft, "_plan", FakePlan)


# --- tests -------------------------------------------------------------------------------------
def test_fastdiv_matches_integer_division() -> None:
    rng = np.random.default_rng()
    divisors = [*range(1, 300), *(2**e + d for e in range(9, 31) for d in (-1, 0, 1)),
                *rng.integers(1, 2**31 - 1, 200).tolist()]
    for d in divisors:
        mul, shift = fastdiv(d)
        assert 0 <= mul < 2**32 and 0 <= shift <= 31
        n = np.concatenate([
            rng.integers(0, 2**31 - 1, 2000), [0, 1, d - 1, d, d + 1, 2**31 - 1],
            np.arange(max(0, 7 * d - 5), min(2**31 - 1, 7 * d + 5)),
        ])
        n = n[(n >= 0) & (n < 2**31)]
        np.testing.assert_array_equal(fdiv(n, mul, shift), n // d, err_msg=f"d={d}")


SHAPES: dict[str, dict[str, Any]] = {
    "odd": dict(n=3, c=5, h=9, w=7, k=7, r=3, s=3, pad=1),
    "k_over_tile": dict(n=1, c=3, h=6, w=5, k=130, r=3, s=3, pad=1),
    "pixels_over_tile": dict(n=2, c=2, h=11, w=13, k=4, r=1, s=1),
    "pq_multiple_of_4": dict(n=2, c=4, h=8, w=8, k=6, r=3, s=3, pad=1),
    "stride_pad_pair": dict(n=2, c=3, h=10, w=9, k=5, r=3, s=2, pad=(2, 1), stride=(2, 3)),
    "dilation": dict(n=1, c=4, h=12, w=11, k=5, r=3, s=3, pad=(2, 3), dilation=(2, 3)),
    "pad_gt_filter": dict(n=2, c=3, h=4, w=5, k=2, r=3, s=3, pad=4),
    "groups": dict(n=2, c=8, h=7, w=6, k=12, r=3, s=3, pad=1, stride=2, groups=4),
    "depthwise": dict(n=3, c=5, h=9, w=9, k=5, r=3, s=3, pad=1, groups=5),
    "filter_eq_padded": dict(n=1, c=4, h=4, w=3, k=3, r=6, s=7, pad=(1, 2)),
    "many_channels": dict(n=2, c=40, h=5, w=6, k=6, r=3, s=3, pad=1),  # several K-steps/chunks
}

ALGOS: dict[str, Algorithm] = {
    "direct": direct.DirectCuda(),
    "im2col_gemm": im2col_gemm.Im2colGemmCuda(),
    "implicit_gemm": implicit_gemm.ImplicitGemmCuda(),
    "fft": fft.FftCuda(),
}


def _check(name: str, problem: ConvProblem) -> None:
    algorithm = ALGOS[name]
    assert algorithm.supports(problem), algorithm.supports(problem).reason
    rng = np.random.default_rng()
    x = rng.standard_normal(problem.input_shape).astype(problem.dtype)
    w = rng.standard_normal(problem.filter_shape).astype(problem.dtype)
    ref = reference_conv(x, w, problem)
    for config in algorithm.configs(problem):
        nbytes = algorithm.workspace_bytes(problem, config)
        workspace = dev(np.full(nbytes, 0xFF, np.uint8)) if nbytes else None
        y = dev(np.full(problem.output_shape, np.nan, problem.dtype))
        algorithm.run(dev(x), dev(w), y, workspace, problem, config)
        assert not np.isnan(y).any(), f"{config}: unwritten outputs"
        err = relative_error(np.asarray(y), ref)
        assert err <= tolerance(problem.dtype, name), f"{config}: rel err {err}"


@pytest.mark.usefixtures("emulated")
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("name", list(ALGOS))
def test_host_code_and_index_math(name: str, shape: str) -> None:
    _check(name, ConvProblem(**SHAPES[shape]))


@pytest.mark.usefixtures("emulated")
@pytest.mark.parametrize("dtype", ["float16", "float64"])
@pytest.mark.parametrize("name", list(ALGOS))
def test_other_dtypes(name: str, dtype: str) -> None:
    problem = ConvProblem(**SHAPES["groups"], dtype=dtype)
    if not ALGOS[name].supports(problem):
        pytest.skip(ALGOS[name].supports(problem).reason)
    _check(name, problem)


def test_fft_workspace_regions_do_not_overlap() -> None:
    problem = ConvProblem(**SHAPES["groups"])
    spans = sorted(fft.workspace_layout(problem).values())
    for (o1, n1), (o2, _n2) in itertools.pairwise(spans):
        assert o1 + n1 <= o2 and o2 % 256 == 0


# --- alignment -------------------------------------------------------------------------------
def dev_at(a: np.ndarray, misalign: int) -> DeviceArray:
    """A C-contiguous DeviceArray copy of `a` whose address is `misalign` bytes past a
    256-byte boundary (a sliced caller buffer; CuPy's own allocations have misalign 0)."""
    a = np.ascontiguousarray(a)
    raw = np.zeros(a.nbytes + 512, np.uint8)
    start = (-raw.__array_interface__["data"][0]) % 256 + misalign
    out = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out.view(DeviceArray)


#: Shapes where nothing is a multiple of 4 (or 2): P*Q, k, c, c/groups, filter taps.
ALIGN_SHAPES: dict[str, dict[str, Any]] = {
    "pq_odd_k_odd": dict(n=3, c=3, h=5, w=7, k=5, r=3, s=3, pad=1),  # P*Q = 35
    "pq_odd_stride": dict(n=2, c=6, h=9, w=9, k=7, r=3, s=1, stride=(2, 3)),  # Q = 3, P*Q = 12
    "pq_2": dict(n=3, c=5, h=1, w=2, k=3, r=1, s=1),  # P*Q = 2: vectors would straddle images
    "pq_6_groups": dict(n=2, c=6, h=2, w=3, k=9, r=1, s=1, groups=3),  # kg = 3
    "one_pixel": dict(n=5, c=7, h=1, w=1, k=3, r=1, s=1),  # 1x1 spatial, FFT side 1 -> 2
    "conv1d_hx1": dict(n=2, c=3, h=11, w=1, k=5, r=3, s=1, pad=(1, 0)),  # W = 1
}


def _run_aligned_case(name: str, problem: ConvProblem, x_off: int, w_off: int,
                      y_off: int) -> None:
    algorithm = ALGOS[name]
    support = algorithm.supports(problem)
    if not support:
        pytest.skip(support.reason)
    rng = np.random.default_rng()
    x = rng.standard_normal(problem.input_shape).astype(problem.dtype)
    w = rng.standard_normal(problem.filter_shape).astype(problem.dtype)
    ref = reference_conv(x, w, problem)
    for config in algorithm.configs(problem):
        nbytes = algorithm.workspace_bytes(problem, config)
        workspace = dev_at(np.full(nbytes, 0xFF, np.uint8), 0) if nbytes else None
        y = dev_at(np.full(problem.output_shape, np.nan, problem.dtype), y_off)
        algorithm.run(dev_at(x, x_off), dev_at(w, w_off), y, workspace, problem, config)
        assert not np.isnan(y).any(), f"{config}: unwritten outputs"
        err = relative_error(np.asarray(y), ref)
        assert err <= tolerance(problem.dtype, name), f"{config}: rel err {err}"


@pytest.mark.usefixtures("emulated")
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
@pytest.mark.parametrize("shape", list(ALIGN_SHAPES))
@pytest.mark.parametrize("name", list(ALGOS))
def test_alignment_shapes_with_element_aligned_buffers(name: str, shape: str, dtype: str) -> None:
    """x, w and y only element-aligned (one element past a 256-byte boundary, as a slice of a
    caller's tensor is): every access the stand-ins check must still be aligned."""
    item = DTYPES[dtype]
    _run_aligned_case(name, ConvProblem(**ALIGN_SHAPES[shape], dtype=dtype), item, item, item)


@pytest.mark.usefixtures("emulated")
@pytest.mark.parametrize("y_off", [0, 4, 8, 12])
def test_implicit_gemm_vector_stores_only_when_aligned(y_off: int) -> None:
    """P*Q % 4 == 0: the float4 epilogue runs exactly when y is 16-byte aligned."""
    problem = ConvProblem(**SHAPES["pq_multiple_of_4"])  # P*Q = 64
    _run_aligned_case("implicit_gemm", problem, 4, 4, y_off)
    assert LAUNCHES and all(launch["vec_out"] == int(y_off == 0) for launch in LAUNCHES)
    assert all((launch["vec_stores"] > 0) == (y_off == 0) for launch in LAUNCHES)


@pytest.mark.usefixtures("emulated")
@pytest.mark.parametrize("shape", ["pq_odd_k_odd", "pq_2", "pq_6_groups"])
def test_implicit_gemm_no_vector_stores_when_pq_not_multiple_of_4(shape: str) -> None:
    _run_aligned_case("implicit_gemm", ConvProblem(**ALIGN_SHAPES[shape]), 0, 0, 0)
    assert LAUNCHES and all(launch["vec_out"] == 0 for launch in LAUNCHES)


@pytest.mark.usefixtures("emulated")
@pytest.mark.parametrize("name", ["fft", "im2col_gemm"])
def test_misaligned_workspace_is_refused_on_the_host(name: str) -> None:
    """A workspace sliced off a boundary must raise, not fault on the GPU."""
    problem = ConvProblem(**SHAPES["odd"], dtype="float64")
    algorithm = ALGOS[name]
    config = algorithm.configs(problem)[0]
    nbytes = algorithm.workspace_bytes(problem, config)
    workspace = dev_at(np.zeros(nbytes + 8, np.uint8), 4)
    x = dev(np.zeros(problem.input_shape, problem.dtype))
    w = dev(np.zeros(problem.filter_shape, problem.dtype))
    y = dev(np.zeros(problem.output_shape, problem.dtype))
    with pytest.raises(ValueError, match="aligned"):
        algorithm.run(x, w, y, workspace, problem, config)


def test_fft_sizes_are_never_1() -> None:
    """cuFFT is never asked for a transform side of 1 (W = 1 for 1-D convolutions)."""
    for kw in (ALIGN_SHAPES["one_pixel"], ALIGN_SHAPES["conv1d_hx1"]):
        fh, fw = fft.fft_size(ConvProblem(**kw))
        assert fh >= 2 and fw >= 2


def test_fft_workspace_regions_are_aligned_for_every_dtype() -> None:
    for dtype in ("float16", "float32", "float64"):
        for kw in (*SHAPES.values(), *ALIGN_SHAPES.values()):
            problem = ConvProblem(**kw, dtype=dtype)
            layout = fft.workspace_layout(problem)
            total = fft.FftCuda().workspace_bytes(problem, "default")
            spans = sorted(layout.values())
            assert all(offset % 256 == 0 for offset, _ in spans)
            assert spans[-1][0] + spans[-1][1] <= total
            for (o1, n1), (o2, _n2) in itertools.pairwise(spans):
                assert o1 + n1 <= o2


# --- launch limits on problems too big to emulate -------------------------------------------------
GRID_X_LIMIT, GRID_YZ_LIMIT, SMEM_LIMIT = 2**31 - 1, 65535, 48 * 1024


def _checked_launch(filename: str, name_expression: str) -> Callable[..., None]:
    """A kernel stand-in that checks only the launch: grid and block limits, shared memory,
    32-bit scalar arguments (Python ints would be passed as 64-bit and shift the rest)."""

    def kernel(grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...],
               shared_mem: int = 0) -> None:
        assert 1 <= len(grid) <= 3 and 1 <= len(block) <= 3
        assert all(isinstance(v, int) and v >= 1 for v in (*grid, *block))
        assert grid[0] <= GRID_X_LIMIT and all(v <= GRID_YZ_LIMIT for v in grid[1:])
        assert int(np.prod(block)) <= 1024 and 0 <= shared_mem <= SMEM_LIMIT
        for a in args:
            if isinstance(a, np.generic):
                assert isinstance(a, (np.int32, np.uint32, np.float32, np.float64)), a
            else:
                assert hasattr(a, "data"), f"kernel argument {a!r} is not an array or scalar"
        LAUNCHES.append({"kernel": name_expression, "grid": grid, "block": block})

    return kernel


def _checked_gemm(dtype: str, transa: int, transb: int, m: int, n: int, k: int,
                  a: int, lda: int, sa: int, b: int, ldb: int, sb: int,
                  c: int, ldc: int, sc: int, batch: int) -> None:
    assert min(m, n, k, batch) >= 1 and max(m, n, k, lda, ldb, ldc, batch) <= 2**31 - 1
    assert ldc >= m and lda >= (m if transa == 0 else k) and ldb >= (k if transb == 0 else n)


class _NullPlan:
    def __init__(self, fft_type: int, batch: int, fh: int, fw: int) -> None:
        assert batch <= 2**31 - 1 and fh >= 2 and fw >= 2

    def fft(self, a: Any, out: Any, direction: int) -> None:
        pass


class _Sized:
    """A buffer that exists only as an (aligned) address and a size."""

    def __init__(self, nbytes: int) -> None:
        self.data = SimpleNamespace(ptr=1 << 40)
        self.size = nbytes


BIG_PROBLEMS: dict[str, dict[str, Any]] = {
    "batch_over_grid_yz": dict(n=70000, c=1, h=3, w=3, k=2, r=3, s=3, pad=1),
    "groups_over_grid_yz": dict(n=1, c=70000, h=2, w=2, k=70000, r=1, s=1, groups=70000),
    "k_tiles_over_grid_yz": dict(n=1, c=1, h=2, w=2, k=600000, r=1, s=1),
    "near_int32": dict(n=64, c=512, h=224, w=224, k=64, r=3, s=3, pad=1),
    "huge_dilation": dict(n=1, c=2, h=300, w=300, k=2, r=3, s=3, dilation=100),
}


@pytest.mark.parametrize("shape", list(BIG_PROBLEMS))
@pytest.mark.parametrize("name", ["direct", "im2col_gemm", "implicit_gemm"])
def test_launches_stay_within_device_limits(monkeypatch: pytest.MonkeyPatch, name: str,
                                            shape: str) -> None:
    """Whatever supports() accepts launches within grid, block and shared-memory limits."""
    for module in (direct, im2col_gemm, implicit_gemm):
        monkeypatch.setattr(module, "get_kernel", _checked_launch)
    monkeypatch.setattr(im2col_gemm, "gemm_strided_batched", _checked_gemm)
    LAUNCHES.clear()
    problem = ConvProblem(**BIG_PROBLEMS[shape])
    algorithm = ALGOS[name]
    if not algorithm.supports(problem):
        assert algorithm.supports(problem).reason
        return
    for config in algorithm.configs(problem):
        ws = algorithm.workspace_bytes(problem, config)
        algorithm.run(_Sized(1), _Sized(1), _Sized(1), _Sized(ws) if ws else None, problem,
                      config)
    assert LAUNCHES


@pytest.mark.parametrize("shape", ["groups_over_grid_yz", "one_pixel_many_planes"])
def test_fft_launches_stay_within_device_limits(monkeypatch: pytest.MonkeyPatch,
                                                shape: str) -> None:
    kw = BIG_PROBLEMS.get(shape) or dict(n=3000, c=30, h=1, w=1, k=3, r=1, s=1)
    monkeypatch.setattr(fft, "get_kernel", _checked_launch)
    monkeypatch.setattr(fft, "gemm_strided_batched", _checked_gemm)
    monkeypatch.setattr(fft, "_plan", _NullPlan)
    LAUNCHES.clear()
    problem = ConvProblem(**kw)
    algorithm = ALGOS["fft"]
    if not algorithm.supports(problem):
        assert algorithm.supports(problem).reason
        return
    ws = algorithm.workspace_bytes(problem, "default")
    algorithm.run(_Sized(1), _Sized(1), _Sized(1), dev(np.zeros(ws, np.uint8)), problem,
                  "default")
    assert LAUNCHES
