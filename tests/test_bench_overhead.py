"""benchmarks/bench_overhead.py's model rows: both models timed in rounds, and what
"predicted" is made of."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the benchmark times torch models")

import torch
from torch import nn

from benchmarks import bench_overhead as bench
from tuner.nn import Conv2d, convert


def test_the_model_rows_time_both_models_in_rounds(db_url: str) -> None:
    torch.manual_seed(0)

    def small() -> nn.Module:
        return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 2, 1))

    reference, converted = small().eval(), small().eval()
    converted.load_state_dict(reference.state_dict())
    convert(converted, db=db_url)
    assert all(isinstance(m, Conv2d) for m in converted.modules() if isinstance(m, nn.Conv2d))
    image = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(converted(image), reference(image), rtol=1e-4, atol=1e-4)
        rows = bench.model_rows(reference, converted, image, lambda: None, seconds=0.03)
    assert (rows["batch"], rows["convolutions"]) == (2, 2)
    assert {len(v) for v in rows["rounds"].values()} == {bench.MODEL_ROUNDS}
    for key, values in rows["rounds"].items():
        assert rows[key] == pytest.approx(sorted(values)[bench.MODEL_ROUNDS // 2])
    assert rows["predicted_ms"] == pytest.approx(
        rows["torch_ms"] - rows["torch_convs_ms"] + rows["our_convs_ms"])
    assert rows["converted_over_predicted"] == pytest.approx(
        rows["converted_ms"] / rows["predicted_ms"])
    assert all(v > 0 for values in rows["rounds"].values() for v in values)
