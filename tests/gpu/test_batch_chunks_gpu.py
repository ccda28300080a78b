"""A convolution whose input and output have 2**31 elements or more, run on a GPU in batch
chunks (tuner.batch_chunks), against cuDNN on each image alone.

Every CUDA algorithm here indexes in 32 bits and refuses such a problem whole; a plan runs
it as chunks of one image each (about 1.07e9 elements). Needs about 26 GB of GPU memory
for x and y and a few more for cuDNN's per-image results; the algorithm is named, so
nothing of the 3-image problem is tuned.
"""

from __future__ import annotations

import pytest

from algorithms.problem import ConvProblem
from tuner import convolve, plan
from tuner.batch_chunks import ChunkedPlan

PROBLEM = ConvProblem(n=3, c=16, h=8192, w=8192, k=16, r=3, s=3, pad=1)
ALGORITHM = "implicit_gemm"


def test_operands_of_2_31_elements_run_in_chunks_on_the_gpu(db_url: str) -> None:
    torch = pytest.importorskip("torch")
    free, _total = torch.cuda.mem_get_info()
    if free < 40 * 2**30:
        pytest.skip(f"needs 40 GiB of free GPU memory, {free / 2**30:.0f} GiB free")
    assert PROBLEM.n * PROBLEM.c * PROBLEM.h * PROBLEM.w >= 2**31
    chosen = plan(PROBLEM, "cuda:0", db=db_url, algorithm=ALGORITHM)
    assert isinstance(chosen, ChunkedPlan)
    assert [(start, end) for start, end, _ in chosen.chunks] == [(0, 1), (1, 2), (2, 3)]
    x = torch.randn(PROBLEM.input_shape, device="cuda")
    w = torch.randn(PROBLEM.filter_shape, device="cuda")
    y = convolve(x, w, padding=1, device="cuda:0", db=db_url, algorithm=ALGORITHM)
    assert isinstance(y, torch.Tensor) and tuple(y.shape) == PROBLEM.output_shape
    allowed = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        for image in range(PROBLEM.n):  # the last image is where 32-bit offsets would wrap
            expected = torch.nn.functional.conv2d(x[image:image + 1], w, padding=1)
            error = ((y[image:image + 1] - expected).norm() / expected.norm()).item()
            assert error <= 1e-5, (image, error)
            del expected
    finally:
        torch.backends.cudnn.allow_tf32 = allowed
