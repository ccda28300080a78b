"""How tests/cuda_emu/build.py groups kernel instances into libraries, and what
tests/cuda_emu/translate.py makes of their source (no compiler needed)."""

from __future__ import annotations

import re

import pytest

from algorithms.cuda import shipped_kernels
from tests.cuda_emu.build import GROUP_SIZE, group_of, groups
from tests.cuda_emu.translate import needs_fibers, unit_source


def test_groups_partition_a_files_instances_the_same_way_every_time() -> None:
    for names in shipped_kernels().values():
        parts = groups(names)
        flat = [name for part in parts for name in part]
        assert sorted(flat) == sorted(set(names))
        assert all(0 < len(part) <= GROUP_SIZE for part in parts)
        # A case runner knows only the instance list, in whatever order: same groups.
        assert groups(reversed(names)) == parts
        for name in names:
            assert name in group_of(name, names)


def test_an_instance_outside_the_list_is_built_alone() -> None:
    assert group_of("direct_conv<float, 1, 1, 1>", ["direct_conv<float, 16, 16, 8>"]) == (
        "direct_conv<float, 1, 1, 1>",)


def test_each_instance_of_a_unit_is_exported_with_its_own_fiber_choice() -> None:
    # Threads of a kernel with neither barriers nor warp instructions run as plain calls.
    expected = {"im2col.cu": {"false"}, "direct.cu": {"true", "false"},
                "implicit_gemm_wgmma.cu": {"true"}}
    for filename, flags in expected.items():
        seen: set[str] = set()
        for group in groups(shipped_kernels()[filename]):
            source = unit_source(filename, group)
            launches = re.findall(r"emu_launch_(\d+)\(.*?seed, (true|false)\);", source, re.S)
            assert [int(i) for i, _ in launches] == list(range(len(group)))
            assert len(re.findall(r"emu_signature_\d+\(\)", source)) == len(group)
            seen |= {flag for _, flag in launches}
        assert seen == flags, filename


SOURCE = """
__device__ void mma_step(float* a) { emu::ptx_mma_sync_aligned_m16n8k8(a[0]); }
__device__ void wait_all() { __syncthreads(); }
template <int N> __device__ float scale(float v) { return v * N; }
__device__ float via_helper(float v) { return scale<2>(v); }  // not wait_all()
__global__ void plain(float* y) { if (y) { y[0] = via_helper(y[0]); } }
__global__ void barrier(float* y) { y[0] = scale<3>(y[0]); wait_all(); }
__global__ void warp(float* y) { mma_step(y); }
/* __global__ void commented(float* y) { wait_all(); } */
"""


def test_fibers_follow_calls_to_barriers_and_warp_instructions() -> None:
    assert not needs_fibers(SOURCE, "plain")  # calls, and a comment naming wait_all()
    assert needs_fibers(SOURCE, "barrier")  # through a call, after a template call
    assert needs_fibers(SOURCE, "warp")
    with pytest.raises(ValueError, match="commented"):
        needs_fibers(SOURCE, "commented")
