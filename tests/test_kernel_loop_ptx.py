"""benchmarks/kernel_loop_ptx.py: the K-step loop it cuts out of the PTX, and what it counts."""

from __future__ import annotations

import shutil
from collections import Counter

import pytest

from algorithms.cuda._loader import KERNELS_DIR
from benchmarks.kernel_loop_ptx import compile_ptx, kind, loop_instructions

PTX = """
    mov.u32 %r1, 0;
    bar.sync 0;
$L__BB0_3:
    // a comment
    add.s32 %r2, %r1, 3;
    @%p1 bra $L__BB0_4;
    cp.async.ca.shared.global [%rd1], [%rd2], 16, %r3;
    {
    wgmma.fence.sync.aligned;
    }
    wgmma.wait_group.sync.aligned 1;
    add.s32 %r4, %r2, 1;
"""


def test_the_loop_runs_from_the_barrier_to_the_wgmma_wait() -> None:
    body = loop_instructions(PTX)
    assert body[0] == "bar.sync 0;" and body[-1] == "wgmma.wait_group.sync.aligned 1;"
    assert [kind(line) for line in body] == ["bar", "add", "bra", "cp.async", "wgmma",
                                             "wgmma"]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on the PATH")
def test_a_shipped_instance_issues_its_copies_and_wgmma_once_per_k_step() -> None:
    # 128 output channels, 256 threads: 4 copies of A and 4 of B per thread and K-step, one
    # commit; the fence, 4 wgmma (K-steps of 128 bytes, 32 per wgmma), commit and wait.
    nvcc = shutil.which("nvcc")
    assert nvcc is not None
    body = loop_instructions(compile_ptx("implicit_gemm_wgmma_conv<half_t, 128, 5, 1, 1>",
                                         KERNELS_DIR, nvcc))
    kinds = Counter(kind(line) for line in body)
    assert kinds["cp.async"] == 4 + 4 + 1
    assert kinds["wgmma"] == 1 + 4 + 2
    assert sum(line.startswith("wgmma.mma_async") for line in body) == 4


def test_the_nchw_loop_starts_at_the_copy_wait_before_the_barrier() -> None:
    # The NCHW kernel rounds its landed W chunks between the copy wait and the barrier.
    ptx = ("    cp.async.wait_group 3;\n    mov.u32 %r1, 0;\n    cp.async.wait_group 2;\n"
           "    st.shared.v4.f32 [%r1], {%f1, %f2, %f3, %f4};\n" + PTX)
    body = loop_instructions(ptx, from_copy_wait=True)
    assert body[:2] == ["cp.async.wait_group 2;", "st.shared.v4.f32 [%r1], {%f1, %f2, %f3, %f4};"]
    assert body[-1] == "wgmma.wait_group.sync.aligned 1;"
