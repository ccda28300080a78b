"""bench_train.py's layer-by-layer part: which convolutions a model runs, and timing one."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from benchmarks.bench_train import TIMED, distinct_convolutions, layer_ms  # noqa: E402


def test_distinct_convolutions_are_counted_once_per_shape() -> None:
    nn = torch.nn
    same = nn.Conv2d(4, 4, 3, padding=1, bias=False)
    model = nn.Sequential(same, nn.Conv2d(4, 4, 3, padding=1, bias=False),
                          nn.Conv2d(4, 6, 1, stride=2, bias=False), nn.ReLU())
    found = distinct_convolutions(model, torch.randn(2, 4, 7, 7))
    assert [(name, tuple(shape), count) for name, _, shape, count in found] == [
        ("0", (2, 4, 7, 7), 2), ("2", (2, 4, 7, 7), 1)]
    assert found[0][1] is same


def test_layer_ms_times_every_direction_and_the_backward_whole(tmp_path: Path) -> None:
    conv = torch.nn.Conv2d(3, 4, 3, padding=1, stride=2, bias=False)
    times = layer_ms(conv, torch.Size((1, 3, 6, 5)), f"sqlite:///{tmp_path}/t.db",
                     lambda: None, 0.01)
    assert set(times) == set(TIMED)
    assert all(theirs > 0 and ours > 0 for theirs, ours in times.values())


def test_layer_ms_refuses_padding_it_cannot_time(tmp_path: Path) -> None:
    conv = torch.nn.Conv2d(3, 4, 3, padding="same", bias=False)
    with pytest.raises(ValueError, match="explicit zero padding"):
        layer_ms(conv, torch.Size((1, 3, 6, 6)), f"sqlite:///{tmp_path}/t.db", lambda: None,
                 0.01)
