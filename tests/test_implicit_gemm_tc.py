"""implicit_gemm_tc's host side without a GPU: supports, configs, name expressions, limits.

The kernel itself is compiled spill-free for sm_80 and sm_90 by tests/test_kernels_compile.py
(every name in shipped_kernels()) and run under the emulator by tests/test_cuda_emulated.py.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from algorithms.cuda import implicit_gemm_tc as tc
from algorithms.cuda import shipped_kernels
from algorithms.cuda._loader import DEFAULT_SMEM_LIMIT, KERNELS_DIR
from algorithms.problem import DIRECTIONS, ConvProblem
from algorithms.registry import ALGORITHM_NAMES, get_algorithm
from tests.precision import make_problem

ALG = tc.ImplicitGemmTcCuda()
BASIC: dict[str, Any] = dict(n=2, c=16, h=9, w=9, k=24, r=3, s=3, pad=1)


def test_name_is_registered_after_the_first_four() -> None:
    assert ALGORITHM_NAMES[:5] == ("direct", "im2col_gemm", "implicit_gemm", "fft",
                                   "implicit_gemm_tc")
    assert get_algorithm("cuda", "implicit_gemm_tc").name == "implicit_gemm_tc"


def test_cpu_entry_is_gpu_only_with_a_reason() -> None:
    support = get_algorithm("cpu", "implicit_gemm_tc").supports(ConvProblem(**BASIC))
    assert not support and "GPU-only" in str(support.reason)


@pytest.mark.parametrize(("dtype", "math"), [
    ("float32", "fp32"), ("float32", "tf32"), ("float16", "fp32"), ("bfloat16", "fp32"),
])  # TF32 is a float32 choice: ConvProblem refuses it with 16-bit storage
def test_supports_every_dtype_and_math(dtype: str, math: str) -> None:
    problem = make_problem(**BASIC, dtype=dtype, math=math)
    assert ALG.supports(problem)
    assert ALG.configs(problem) == tuple(tc.tiles(dtype, math))
    assert all(ALG.workspace_bytes(problem, c) == 0 for c in ALG.configs(problem))
    # 3xTF32 leaves out the one tile that spills with its per-step partial sums.
    assert ("128x64" in ALG.configs(problem)) == (tc.passes(dtype, math) == 1)


def test_refuses_float64_in_every_direction_and_serves_both_backward_ones() -> None:
    for direction in DIRECTIONS:
        support = ALG.supports(ConvProblem(**BASIC, dtype="float64", direction=direction))
        assert not support and "float64" in str(support.reason)
    for direction in ("backward_data", "backward_filter"):
        assert ALG.supports(ConvProblem(**BASIC, direction=direction))


def test_refuses_a_grid_too_tall() -> None:
    # groups * channel tiles beyond grid.y's 65535: 70000 groups of one channel each.
    problem = ConvProblem(n=1, c=70000, h=1, w=1, k=70000, r=1, s=1, groups=70000)
    support = ALG.supports(problem)
    assert not support and "grid" in str(support.reason)


def test_refuses_int32_overflow() -> None:
    problem = ConvProblem(n=64, c=1024, h=256, w=256, k=8, r=1, s=1)
    assert not ALG.supports(problem)


def test_math_picks_the_number_of_tf32_passes() -> None:
    assert tc.passes("float32", "fp32") == 3
    assert tc.passes("float32", "tf32") == 1
    assert tc.passes("float16", "fp32") == tc.passes("bfloat16", "tf32") == 1
    assert tc.name_expression("float32", "64x64", "fp32").endswith(", 3, 1, 1>")
    assert tc.name_expression("float32", "64x64", "tf32").endswith(", 1, 1, 1>")
    assert tc.name_expression("bfloat16", "64x64").startswith("implicit_gemm_tc_conv<bf16_t,")


def test_shipped_instances_are_every_dtype_config_math_and_copy_width() -> None:
    names = shipped_kernels()[tc.KERNEL_FILE]
    # (f32 x 2 maths, f16, bf16; 3xTF32 without 128x64) x (element, vector A, vector A and B)
    assert len(names) == len(set(names)) == (len(tc.CONFIGS) * 4 - 1) * 3
    for dtype in tc.DTYPES:
        vec = tc.vector_elements(dtype)
        for math in tc.MATHS:
            for config in tc.tiles(dtype, math):
                for widths in ((1, 1), (vec, 1), (vec, vec)):
                    assert tc.name_expression(dtype, config, math, widths) in names


def test_vector_widths_follow_the_filter_row_and_the_pointwise_geometry() -> None:
    # A vectors need C/groups*R*S % (16 bytes / itemsize) == 0; B vectors also a 1x1,
    # stride-1, unpadded filter and P*Q a whole number of vectors.
    cases: list[tuple[dict[str, Any], str, tuple[int, int]]] = [
        (dict(n=1, c=8, h=4, w=4, k=8, r=1, s=1), "float32", (4, 4)),
        (dict(n=1, c=8, h=4, w=4, k=8, r=1, s=1), "float16", (8, 8)),
        (dict(n=1, c=8, h=3, w=3, k=8, r=1, s=1), "float32", (4, 1)),  # P*Q = 9
        (dict(n=1, c=8, h=4, w=4, k=8, r=1, s=1, pad=1), "float32", (4, 1)),
        (dict(n=1, c=8, h=8, w=8, k=8, r=1, s=1, stride=2), "float32", (4, 1)),
        (dict(n=1, c=4, h=4, w=4, k=8, r=3, s=3, pad=1), "float32", (4, 1)),  # CRS = 36
        (dict(n=1, c=4, h=4, w=4, k=8, r=3, s=3, pad=1), "float16", (1, 1)),  # 36 % 8
        (dict(n=1, c=12, h=4, w=4, k=6, r=1, s=1, groups=3), "float32", (4, 4)),
        (dict(n=1, c=12, h=4, w=4, k=6, r=1, s=1, groups=6), "float32", (1, 1)),  # cg = 2
        (dict(n=1, c=3, h=8, w=8, k=8, r=7, s=7, pad=3), "bfloat16", (1, 1)),  # CRS = 147
    ]
    for kw, dtype, widths in cases:
        assert tc.vector_widths(make_problem(**kw, dtype=dtype)) == widths, (kw, dtype)


@pytest.mark.parametrize("config", list(tc.CONFIGS))
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_stages_fit_static_shared_memory(config: str, dtype: str) -> None:
    assert 2 <= tc.stages(dtype, config) <= tc.MAX_STAGES
    assert tc.smem_bytes(dtype, config) <= DEFAULT_SMEM_LIMIT


@pytest.mark.parametrize("config", list(tc.CONFIGS))
def test_tiles_split_into_warps_and_mma_tiles(config: str) -> None:
    t = tc.CONFIGS[config]
    assert t.bm % (16 * t.wm) == 0 and t.bn % (8 * t.wn) == 0
    assert t.threads % t.bn == 0 and tc.BK % (t.threads // t.bn) == 0  # kernel static_asserts
    assert t.bm * tc.BK % t.threads == 0


def test_launch_grid_covers_pixels_groups_and_channel_tiles() -> None:
    problem = ConvProblem(n=3, c=8, h=10, w=10, k=200, r=3, s=3, pad=1, groups=2)
    assert tc.launch_grid(problem, "64x128") == (3, 2 * 2, 1)  # 300 pixels, kg=100 -> 2 tiles


def test_kernel_source_uses_the_documented_instructions() -> None:
    text = (KERNELS_DIR / tc.KERNEL_FILE).read_text() + (KERNELS_DIR / "common.cuh").read_text()
    for instruction in ("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32",
                        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
                        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                        "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
                        "cp.async.ca.shared.global", "cvt.rna.tf32.f32"):
        assert instruction in text
    assert re.search(r"NCHW", tc.__doc__ or "")


NVCC = shutil.which("nvcc")


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
def test_documented_shared_memory_matches_ptxas(tmp_path: Path) -> None:
    """smem_bytes (which picks the stage count) is what ptxas allocates, per instance."""
    assert NVCC is not None
    names = tc.shipped_kernels()
    src = tmp_path / "keep.cu"
    src.write_text(f'#include "{tc.KERNEL_FILE}"\nvoid* keep[] = {{'
                   + ", ".join(f"(void*)&{n}" for n in names) + "};\n")
    done = subprocess.run(
        [NVCC, "-std=c++17", "-arch=sm_90", "-I", str(KERNELS_DIR), "--resource-usage", "-c",
         str(src), "-o", str(tmp_path / "keep.o")], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    reported = [int(b) for b in re.findall(r"(\d+) bytes smem", done.stdout + done.stderr)]
    vec = tc.vector_elements
    expected = {tc.name_expression(d, c, m, widths): tc.smem_bytes(d, c)
                for d in tc.DTYPES for m in tc.MATHS for c in tc.tiles(d, m)
                for widths in ((1, 1), (vec(d), 1), (vec(d), vec(d)))}
    assert len(reported) == len(names)
    assert sorted(reported) == sorted(expected[n] for n in names)
