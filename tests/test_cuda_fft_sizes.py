"""The CUDA fft algorithm's sizes on the host, against hand-derived counts: the transform
size (the padded input, both pads, in 2,3,5,7-smooth lengths), each workspace region's
elements (the largest of the tensors that take turns in it) and the transposes' grid-y
bound. A wrong answer is a circular wrap-around, a region overrun or a launch a GPU refuses.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from algorithms.cuda import _cublas, fft
from algorithms.problem import ConvProblem
from tests.cuda_emu.host import dev
from tests.cuda_kernel_standins import Sized, checked_gemm

ALG = fft.FftCuda()


def test_next_fast_len_is_the_next_2_3_5_7_smooth_length() -> None:
    # Mutation gap: 7 among cuFFT's fast radices was unpinned (49 became 50).
    smooth = [m for m in range(1, 130)
              if all(p in (2, 3, 5, 7) for p in _factors(m))]
    for n in range(1, 120):
        assert fft.next_fast_len(n) == min(m for m in smooth if m >= n), n
    assert fft.next_fast_len(49) == 49 and fft.next_fast_len(97) == 98


def _factors(m: int) -> list[int]:
    out, d = [], 2
    while m > 1:
        while m % d == 0:
            out.append(d)
            m //= d
        d += 1
    return out


def test_the_transform_covers_the_input_and_both_pads() -> None:
    # Mutation gap: fft_size's width counted one pad only: the circular correlation then
    # wraps onto valid output pixels.
    problem = ConvProblem(n=1, c=1, h=10, w=9, k=1, r=3, s=3, pad=(3, 2))
    assert fft.fft_size(problem) == (16, 14)  # 10 + 6 = 16; 9 + 4 = 13 -> 14


def test_each_region_holds_the_largest_tensor_that_takes_turns_in_it() -> None:
    # Mutation gap: the output's n*k planes and spectra (largest here) were unpinned in the
    # "planes" and "spectra2" regions, which the inverse and the GEMM output reuse.
    problem = ConvProblem(n=4, c=2, h=6, w=6, k=8, r=3, s=3, pad=1)
    fh, fw = fft.fft_size(problem)
    assert (fh, fw) == (8, 8)
    f = 8 * 5
    layout = fft.workspace_layout(problem)
    assert layout["planes"][1] == 4 * 8 * fh * fw * 4  # n*k = 32 > n*c = 8 > k*c = 16
    assert layout["spectra1"][1] == 32 * f * 8
    assert layout["spectra2"][1] == 32 * f * 8
    assert layout["xt"][1] == f * 8 * 8 and layout["wt"][1] == f * 16 * 8
    filters = ConvProblem(n=1, c=8, h=6, w=6, k=16, r=3, s=3, pad=1)  # k*c = 128 largest
    assert fft.workspace_layout(filters)["planes"][1] == 128 * 8 * 8 * 4
    assert fft.workspace_layout(filters)["spectra2"][1] == 128 * f * 8


def test_the_transposes_grid_takes_65535_rows_of_32_planes_or_frequencies() -> None:
    # Mutation gap: the transpose grid's y bound (ceil(rows / 32) <= 65535) and the
    # frequencies among its rows were unpinned.
    assert ALG.supports(ConvProblem(n=1, c=65535 * 32, h=1, w=1, k=1, r=1, s=1))
    refused = ALG.supports(ConvProblem(n=1, c=65535 * 32 + 1, h=1, w=1, k=1, r=1, s=1))
    assert not refused and "transpose grid" in refused.reason
    # 2048 x 2048 planes: 2048 x 1025 frequencies, 65600 rows of 32.
    refused = ALG.supports(ConvProblem(n=1, c=1, h=2048, w=2048, k=1, r=1, s=1))
    assert not refused and "transpose grid" in refused.reason
    assert ALG.supports(ConvProblem(n=1, c=1, h=2000, w=2000, k=1, r=1, s=1))


def test_fused_is_offered_up_to_eight_gemm_calls() -> None:
    # Mutation gap: FUSED_MAX_GEMMS' bound was pinned only far from it (one group, or 960).
    def configs(groups: int) -> tuple[str, ...]:
        return ALG.configs(ConvProblem(n=2, c=groups, h=8, w=8, k=groups, r=3, s=3, pad=1,
                                       groups=groups))

    assert fft.FUSED in configs(8)
    assert fft.FUSED not in configs(9)
    single = ConvProblem(n=1, c=16, h=8, w=8, k=16, r=3, s=3, pad=1, groups=16)
    assert fft.gemm_calls(single) == 1 and fft.FUSED in ALG.configs(single)


class _NullPlan:
    def __init__(self, *args: Any) -> None:
        pass

    def fft(self, a: Any, out: Any, direction: int) -> None:
        pass


def test_each_transpose_puts_columns_on_grid_x_and_rows_on_grid_y(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Mutation gap: the transposes' grid orientation was unpinned (kernels/fft_helpers.cu
    # fft_transpose tiles columns by blockIdx.x and rows by blockIdx.y): swapped, most tiles
    # were never moved.
    grids: list[tuple[tuple[int, ...], int, int]] = []

    def get_kernel(file: str, name: str) -> Any:
        def kernel(grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...],
                   shared_mem: int = 0) -> None:
            if name.startswith("fft_transpose"):
                grids.append((grid, int(args[2]), int(args[3])))
        return kernel

    monkeypatch.setattr(fft, "get_kernel", get_kernel)
    monkeypatch.setattr(_cublas, "_gemm", checked_gemm)
    monkeypatch.setattr(fft, "_plan", _NullPlan)
    problem = ConvProblem(n=3, c=2, h=30, w=30, k=5, r=3, s=3)  # 30 x 30: 30 x 16 frequencies
    ws = ALG.workspace_bytes(problem, "default")
    ALG.run(Sized(1), Sized(1), Sized(1), dev(np.zeros(ws, np.uint8)), problem, "default")
    f = 30 * 16
    assert [(rows, cols) for _, rows, cols in grids] == [(6, f), (10, f), (f, 15)]
    for grid, rows, cols in grids:
        assert grid == (-(-cols // 32), -(-rows // 32))
