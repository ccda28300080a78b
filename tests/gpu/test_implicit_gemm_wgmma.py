"""implicit_gemm_wgmma on a compute-capability-9.0 GPU: every configuration in every dtype
and math mode against the float64 reference and, where PyTorch with CUDA is installed,
against torch's own convolution.

Skipped, with the reason, where CuPy or a GPU is missing (see conftest.py) or where the GPU
is not Hopper (the kernel is built for sm_90a only). Not yet run on a GPU.
"""

from __future__ import annotations

import pytest

from algorithms.cuda.implicit_gemm_wgmma import ImplicitGemmWgmmaCuda
from tests.gpu.conftest import (
    assert_every_config_passes,
    assert_split_k_repeats,
    config_failures,
    math_errors,
)
from tests.precision import make_problem, nan_storage, to_storage

pytestmark = pytest.mark.gpu

#: (dtype, math) pairs the kernel ships: 16-bit, TF32 and 3xTF32.
MODES = (("float16", "fp32"), ("bfloat16", "fp32"), ("float32", "tf32"), ("float32", "fp32"))
#: C/groups whole 16-byte vectors in every dtype: stride, dilation, groups, a non-square
#: filter, channel and pixel tiles with remainders, and network layers; the three 1x1 layers
#: run float32's NCHW configurations too (_wgmma_nchw: x in 16-byte vectors at P*Q = 3136,
#: element-wise at 49, where K is 2048 channels long and split, and at stride 2), and the
#: float32 layers with taps and one group its two large NCHW tiles tap by tap; the two
#: first layers (C = 3) run on NHWC copies with their channels padded to a 16-byte vector.
GPU_SHAPES = ("stride2", "dilation_pair", "groups4", "non_square_filter", "many_channels",
              "r50_res4_3x3", "r50_res3_1x1_s2", "vgg_conv3_1", "r50_res2_1x1",
              "r50_res5_1x1a", "r50_conv1", "vgg_conv1_1")
ALGORITHM = ImplicitGemmWgmmaCuda()


@pytest.fixture(autouse=True)
def _hopper() -> None:
    import cupy

    capability = str(cupy.cuda.Device().compute_capability)
    if capability != "90":
        pytest.skip(f"implicit_gemm_wgmma needs compute capability 9.0, not {capability}")


@pytest.mark.parametrize(("dtype", "math"), MODES)
@pytest.mark.parametrize("shape", GPU_SHAPES)
def test_every_config_matches_reference_and_torch(shape: str, dtype: str, math: str) -> None:
    assert_every_config_passes(ALGORITHM, shape, dtype, math)


@pytest.mark.parametrize("math", ("tf32", "fp32"))
def test_96_row_tiles_on_a_googlenet_5x5_layer(math: str) -> None:
    """GoogLeNet's inception3b.5x5 geometry (K = 96: _wgmma_nchw.fits_96) at batch 2: the
    96-row NCHW tiles tap by tap (and their splits) among every configuration offered."""
    problem = make_problem(n=2, c=32, h=28, w=28, k=96, r=5, s=5, pad=2, math=math)
    assert any(c.startswith("96x") for c in ALGORITHM.configs(problem))
    failures = config_failures(ALGORITHM, problem)
    assert not failures, "\n".join(failures)


def test_tf32_is_less_accurate_than_3xtf32() -> None:
    """1xTF32 must not silently run the 3xTF32 path (or the reverse)."""
    errors = math_errors(ALGORITHM, "64x128x32-s4")
    assert errors["fp32"] <= 1e-5 < errors["tf32"] <= 1e-3


@pytest.mark.parametrize(("dtype", "math"), MODES)
def test_split_k_sums_in_the_kernel_run_after_run(dtype: str, math: str) -> None:
    assert_split_k_repeats(ALGORITHM, dtype, math)


@pytest.mark.parametrize(("dtype", "math"), MODES)
def test_warp_specialized_tiles_give_their_one_role_twins_bits(dtype: str, math: str) -> None:
    """A "-ws" tile runs the same wgmma on the same stages in the same order as the one-role
    "-f1" tile of its BM (at 3xTF32 the same partial sums too), so it gives the same bits,
    run after run (as it does in the emulator); a race between its producers and consumers
    would show as a difference. 72-144 K-steps: the stage ring wraps many times."""
    import cupy
    import numpy as np

    problem = make_problem(n=2, c=512, h=14, w=14, k=128, r=3, s=3, pad=1, dtype=dtype,
                           math=math)
    configs = [c for c in ALGORITHM.configs(problem) if "-k" not in c]
    ws = [c for c in configs if "-ws" in c]
    assert ws
    rng = np.random.default_rng()
    x = cupy.asarray(to_storage(rng.standard_normal(problem.input_shape), dtype))
    w = cupy.asarray(to_storage(rng.standard_normal(problem.filter_shape), dtype))

    def run(config: str) -> bytes:
        workspace = cupy.full(ALGORITHM.workspace_bytes(problem, config), 0xFF, cupy.uint8)
        y = cupy.asarray(nan_storage(problem.output_shape, dtype))
        ALGORITHM.run(x, w, y, workspace, problem, config)
        return bytes(cupy.asnumpy(y).tobytes())

    def parts(config: str) -> str:  # "-3xfp16" (float32's 16-bit parts) or ""
        return config[config.find("-3x"):] if "-3x" in config else ""

    for config in ws:  # the twin of a tile of 16-bit parts has the same parts
        bm = config.partition("x")[0]
        twin = next(c for c in configs if c.startswith(f"{bm}x") and "-f1" in c
                    and parts(c) == parts(config))
        expected = run(twin)
        for _ in range(3):
            assert run(config) == expected, f"{config} against {twin}"


@pytest.mark.parametrize("scale", [1e5, 1e-6])
def test_3xfp16_keeps_fp32_accuracy_past_fp16s_range(scale: float) -> None:
    """3xFP16's float16 parts hold x * s and w * s', s and s' powers of two worked out on the
    GPU from each tensor's largest |v|: data far past FP16's range (65504, or its normal
    numbers from 6e-5) must come out as accurate as 3xTF32's, and with one element 10^4
    times the rest (a maximum that missed it would overflow its parts)."""
    import cupy
    import numpy as np

    from algorithms.reference import reference, relative_error

    problem = make_problem(n=2, c=64, h=14, w=14, k=64, r=3, s=3, pad=1, dtype="float32",
                           math="fp32")
    rng = np.random.default_rng()
    x = (rng.standard_normal(problem.input_shape) * scale).astype(np.float32)
    w = (rng.standard_normal(problem.filter_shape) * scale).astype(np.float32)
    x.reshape(-1)[rng.integers(x.size)] *= 1e4
    ref = reference(x.astype(np.float64), w.astype(np.float64), problem)
    configs = [c for c in ALGORITHM.configs(problem) if "3xfp16" in c]
    assert configs
    for config in configs:
        workspace = cupy.full(ALGORITHM.workspace_bytes(problem, config), 0xFF, cupy.uint8)
        y = cupy.full(problem.output_shape, cupy.nan, cupy.float32)
        ALGORITHM.run(cupy.asarray(x), cupy.asarray(w), y, workspace, problem, config)
        assert relative_error(cupy.asnumpy(y), ref) <= 1e-5, config
