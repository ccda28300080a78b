"""Host-side checks of the CUDA algorithms' workspaces that need no GPU: a misaligned
workspace is refused on the host, not faulted on the GPU, and implicit_gemm_wgmma's NHWC
copies write exactly where its named workspace views lie.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from algorithms.cuda import _rearrange, _wgmma_configs, implicit_gemm_wgmma
from algorithms.problem import ConvProblem
from tests.cuda_emu.cases import ALGORITHMS as ALGOS
from tests.cuda_emu.host import dev, dev_at
from tests.cuda_shapes import SHAPES


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


# Pins: a 2-byte-aligned workspace put float16 backward_filter's float32 dW sum off its
# 4-byte alignment (a fault on the GPU); run() must refuse it on the host.
def test_float16_backward_filter_workspace_must_hold_float32() -> None:
    """im2col_gemm's float16 dW sum is float32: a 2-byte-aligned workspace is refused."""
    problem = ConvProblem(**SHAPES["odd"], dtype="float16", direction="backward_filter")
    algorithm = ALGOS["im2col_gemm"]
    config = algorithm.configs(problem)[0]
    column = algorithm.workspace_bytes(replace(problem, direction="forward"), config)
    assert config == "chunk=1"
    # Then dyT, align(1*7*17*13 * 2) (one image's dy as [k][img][pq]), and the float32 sum,
    # align(7*5*9 * 4).
    assert algorithm.workspace_bytes(problem, config) == column + 3328 + 1280
    workspace = dev_at(np.zeros(algorithm.workspace_bytes(problem, config) + 8, np.uint8), 2)
    x, dy, dw = (dev(np.zeros(s, np.float16)) for s in problem.operand_shapes)
    with pytest.raises(ValueError, match="4-byte aligned"):
        algorithm.run(x, dy, dw, workspace, problem, config)


def test_nhwc_copies_write_where_the_views_would() -> None:
    """The NHWC copies and split K's partial sums are passed as byte ranges of the workspace
    (`WorkspaceLayout.byte_ranges`), which must be exactly the named views' memory."""
    problem = ConvProblem(n=3, c=24, h=5, w=6, k=18, r=3, s=2, pad=2, dilation=2, groups=3,
                          dtype="float32", math="fp32")
    for config in ("64x128x32-s4", "64x128x32-s4-k2"):
        layout = implicit_gemm_wgmma.workspace_layout(problem, config)
        workspace: Any = dev(np.zeros(layout.nbytes, np.uint8))
        views = layout.views(workspace)
        tile = _wgmma_configs.parse_config("float32", "fp32", config).tile
        assert isinstance(tile, _wgmma_configs.WgmmaTile)
        copies = _rearrange.nhwc_copies(problem, implicit_gemm_wgmma.nhwc_parts(problem, tile))
        for name, span in (("x", copies.x_bytes), ("w", copies.w_bytes)):
            part = workspace[span]
            assert part.data.ptr == views[name].data.ptr and part.nbytes == views[name].nbytes
        if "part" in views:
            part = layout.byte_ranges()["part"]
            assert workspace[part.start:].data.ptr == views["part"].data.ptr
            assert part.stop - part.start == views["part"].nbytes
