"""The PyTorch module on a GPU (issue 9): a converted model's forward pass and gradients
against the same model in float64, and its forward pass captured in CUDA graphs, by hand
(torch.cuda.graph) and by torch.compile's cudagraphs backend. FP32-accurate math: TF32 off."""

from __future__ import annotations

import copy
import gc
from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from tuner.nn import convert  # noqa: E402
from tuner.service import service  # noqa: E402

SHAPE = (2, 16, 20, 18)
#: Against float64: our FP32 picks are within about 1e-5 of it (relative), sums of 144
#: products of unit normals here.
TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}


@pytest.fixture(autouse=True)
def strict_fp32() -> Iterator[None]:
    before = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False  # the module then asks for math="fp32"
    yield
    torch.backends.cudnn.allow_tf32 = before


def _pair(db_url: str) -> tuple[Any, Any]:
    """(a converted two-layer model on the GPU, the same model in float64)."""
    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(16, 24, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(24, 8, 1, stride=2, bias=False)).cuda()
    reference = copy.deepcopy(model).double()
    return convert(model, db=db_url), reference


def _matches(y: Any, reference: Any, x: Any) -> None:
    torch.testing.assert_close(y.double(), reference(x.double()), **TOLERANCE)


def test_forward_and_gradients_match_float64(db_url: str) -> None:
    model, reference = _pair(db_url)
    x = torch.randn(SHAPE, device="cuda", requires_grad=True)
    x_ref = x.detach().double().requires_grad_()
    y, y_ref = model(x), reference(x_ref)
    grad = torch.randn_like(y)
    y.backward(grad)
    y_ref.backward(grad.double())
    torch.testing.assert_close(y.double(), y_ref, **TOLERANCE)
    torch.testing.assert_close(x.grad.double(), x_ref.grad, **TOLERANCE)
    for ours, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(ours.grad.double(), theirs.grad, **TOLERANCE)


# A graph captured through the module must replay after the Service has dropped the plans
# behind its calls (tuner.plans keeps a plan that ran inside a capture). PyTorch's own
# pattern captures on torch.cuda.graph's stream, where the model never ran: its lanes'
# workspaces are made inside the capture (algorithms.cuda._lanes.relaxed), but not cuFFT
# plans (algorithms.cuda.fft refuses to make one there, as the README says).
@pytest.mark.parametrize("capture_on", ["warm-up stream", "torch's own"])
def test_a_converted_model_captured_by_hand(db_url: str, capture_on: str) -> None:
    model, reference = _pair(db_url)
    x = torch.randn(SHAPE, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad():
        with torch.cuda.stream(side):
            model(x)  # tuned and planned; this stream's workspaces
        torch.cuda.current_stream().wait_stream(side)
        picked = {plan.algorithm for _, plan in service(db_url)._call_plans.values()}
        if capture_on == "torch's own" and "fft" in picked:
            pytest.skip("fft picked: its cuFFT plans are refused in a capture on a new stream")
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side if capture_on == "warm-up stream" else None):
            y = model(x)
    kept = service(db_url)
    kept._plans.clear()
    kept._call_plans.clear()
    gc.collect()
    for _ in range(2):
        x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        _matches(y, reference, x)


def test_torch_compile_cuda_graphs(db_url: str) -> None:
    from torch._dynamo.utils import counters

    model, reference = _pair(db_url)
    compiled = torch.compile(model, backend="cudagraphs")
    counters.clear()
    with torch.no_grad():
        for _ in range(4):  # warm-up runs, the recording, then replays
            x = torch.randn(SHAPE, device="cuda")
            _matches(compiled(x).clone(), reference, x)
    # The backend falls back to running the graph eagerly, with a log line only, when it
    # finds something it cannot capture: then this test would pass without any graph.
    assert not counters["inductor"]["cudagraph_skips"], dict(counters["inductor"])


# Review of 2026-11-30: under torch.autocast the module ran in float32 (F.conv2d runs in
# float16 there), so a float16 activation met a float32 weight and a converted model broke.
def test_autocast_runs_in_float16(db_url: str) -> None:
    model, reference = _pair(db_url)
    x = torch.randn(SHAPE, device="cuda")
    with torch.autocast("cuda", dtype=torch.float16):
        y = model(x)
        from_half = model(x.half())
    assert y.dtype == from_half.dtype == torch.float16
    # float16 operands (11-bit significands) with float32 accumulation, against float64.
    torch.testing.assert_close(y.double(), reference(x.double()), rtol=2e-2, atol=2e-2)
