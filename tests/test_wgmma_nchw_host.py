"""implicit_gemm_wgmma's NCHW configurations (algorithms/cuda/_wgmma_nchw.py) on the host,
against independent oracles: the shared memory kernels/implicit_gemm_wgmma_nchw.cu lays out
per stage, which filters count as having taps, and when x is read in vectors or w copied to
an aligned region first. A wrong answer is a shared-memory overrun, a wrong product or a
misaligned 16-byte access on a GPU, which only a GPU would show.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from algorithms.cuda import _wgmma_nchw
from algorithms.cuda import implicit_gemm_wgmma as wg
from algorithms.cuda._loader import KERNELS_DIR
from algorithms.problem import ConvProblem
from tests.cuda_kernel_standins import Sized

SOURCE = (KERNELS_DIR / _wgmma_nchw.KERNEL_FILE).read_text(encoding="utf-8")


def _kernel_smem(tile: _wgmma_nchw.NchwTile, copies: int) -> int:
    """STAGES x STAGE_BYTES as the kernel declares them (W_BYTES = BM * 128, X_BYTES =
    BK * LDX * 4, LDX = BN + pad)."""
    bk = int(re.search(r"constexpr int BK = (\d+)", SOURCE).group(1))  # type: ignore[union-attr]
    pad = int(re.search(r"LDX = BN \+ (\d+);", SOURCE).group(1))  # type: ignore[union-attr]
    return tile.stages * (copies * tile.bm * 128 + bk * (tile.bn + pad) * 4)


@pytest.mark.parametrize("copies", [1, 2])
def test_shared_memory_is_what_the_kernel_lays_out(copies: int) -> None:
    # Mutation gap: x's padded rows (LDX = BN + 8) in NchwTile.smem_bytes were unpinned:
    # without the pad each stage came 1 KiB short of the kernel's tiles.
    for tile in _wgmma_nchw.TILES[copies].values():
        assert tile.smem_bytes(copies) == _kernel_smem(tile, copies), tile
    # The docstring's figure: 3xTF32's 128x128 tile takes 147 KiB in three stages.
    big = _wgmma_nchw.TILES[2]["128x128x32-s3-nchw"]
    assert big.smem_bytes(2) == 147 * 1024


@pytest.mark.parametrize(("r", "s"), [(1, 3), (3, 1), (3, 3)])
def test_a_filter_with_taps_along_either_side_runs_the_taps_kernel(r: int, s: int) -> None:
    # Mutation gap: taps() on the filter's height alone was unpinned: a 1x3 filter ran the
    # 1x1 kernel (one tap) on a W it had not transposed.
    problem = ConvProblem(n=2, c=64, h=12, w=12, k=128, r=r, s=s, pad=1, math="fp32")
    assert _wgmma_nchw.taps(problem)
    assert _wgmma_nchw.offered(problem) <= set(_wgmma_nchw.TAP_TILES[2])
    config = sorted(_wgmma_nchw.offered(problem))[0]
    run = wg._nchw_run(problem, config, 1)
    assert run.with_taps and "true>" in run.gemm.gemm.name
    assert not _wgmma_nchw.taps(ConvProblem(n=2, c=64, h=12, w=12, k=128, r=1, s=1))


def test_x_is_read_in_vectors_only_within_one_image_and_at_16_byte_addresses() -> None:
    # Mutation gap: x_vector's tests (P*Q a multiple of 4 pixels; x 16-byte aligned) were
    # pinned only by P*Q = 49 and a 4-byte offset: P*Q = 6 and an 8-byte offset passed.
    def pointwise(h: int, w: int) -> ConvProblem:
        return ConvProblem(n=2, c=64, h=h, w=w, k=64, r=1, s=1)

    assert _wgmma_nchw.x_vector(pointwise(4, 4), 0x1000) == 4
    assert _wgmma_nchw.x_vector(pointwise(4, 4), 0x1010) == 4
    assert _wgmma_nchw.x_vector(pointwise(4, 4), 0x1008) == 1
    assert _wgmma_nchw.x_vector(pointwise(2, 3), 0x1000) == 1  # a vector would cross images
    assert _wgmma_nchw.x_vector(pointwise(2, 2), 0x1000) == 4


class _Gemm:
    def __init__(self) -> None:
        self.w: list[int] = []

    def enqueue(self, get_kernel: Any, x: Any, w: Any, y: Any, workspace: Any) -> None:
        self.w.append(w.data.ptr)


def test_a_filter_off_16_bytes_is_copied_to_the_aligned_region_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Mutation gap: NchwRun's alignment test of w (W is read in 16-byte vectors only) was
    # unpinned: a w 8 bytes off a 16-byte boundary went to the kernel as it was.
    copies: list[tuple[int, int]] = []
    monkeypatch.setattr(_wgmma_nchw._rearrange, "enqueue_copy",
                        lambda launch, src, dst: copies.append((src.data.ptr, dst.data.ptr)))
    gemm = _Gemm()
    run = _wgmma_nchw.NchwRun(gemm, slice(256, 512), None, False)  # type: ignore[arg-type]
    workspace = Sized(1024, ptr=0x9000)
    for w_ptr in (0x1000, 0x1010, 0x1008, 0x1004):
        run.enqueue(Sized(1), Sized(1, ptr=w_ptr), Sized(1), workspace)
    assert copies == [(0x1008, 0x9100), (0x1004, 0x9100)]
    assert gemm.w == [0x1000, 0x1010, 0x9100, 0x9100]
