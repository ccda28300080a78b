"""The layout of the PyTorch module's output: nn.Conv2d's for every input and weight layout
(CPU; nn.Conv2d the oracle, float64 where numbers are compared)."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from tuner.nn import convert  # noqa: E402


def _one_column(*sizes: int) -> Any:
    """A random float64 (sizes[0], sizes[2], sizes[1], 1) tensor whose channels come first
    in memory and whose width of 1 has stride 1: strides (c*h, 1, c, 1), which are
    channels_last-contiguous (a width of 1 leaves its stride free) but not like
    channels_last's to PyTorch (Tensor.suggest_memory_format: NCHW)."""
    return torch.randn(*sizes, dtype=torch.float64).permute(0, 2, 1).unsqueeze(-1)


def _case(case: str) -> tuple[Any, Any]:
    """(an nn.Conv2d, an input) laid out as `case` says."""
    conv = nn.Conv2d(4, 6, (3, 1) if case.startswith("one_column") else 3,
                     padding=(1, 0)).double()
    x = torch.randn(2, 4, 9, 8, dtype=torch.float64)
    if case == "cropped_input":
        x = torch.randn(2, 4, 11, 12, dtype=torch.float64).contiguous(
            memory_format=torch.channels_last)[:, :, 1:9, 2:10]
    elif case == "one_column_input":
        x = _one_column(2, 7, 4)
    elif case == "one_column_weight":
        x = torch.randn(2, 4, 7, 1, dtype=torch.float64)
        conv.weight = nn.Parameter(_one_column(6, 3, 4))
        assert conv.weight.stride() == (12, 1, 4, 1)
    elif case == "transposed_input":
        x = x.transpose(2, 3)
    elif case == "channel_broadcast_input":
        x = torch.randn(2, 1, 9, 8, dtype=torch.float64).expand(2, 4, 9, 8)
    elif case == "one_channel_1x1":
        conv = nn.Conv2d(1, 6, 1).double()
        assert conv.weight.stride() == (1, 1, 1, 1)
        x = x[:, :1].contiguous()
    return conv, x


# Bug: the output's layout followed channels_last-contiguity, not the strides PyTorch's
# convolution reads (Tensor.suggest_memory_format): a crop of a channels_last input (a
# U-Net's skip connection) came back NCHW where nn.Conv2d's is channels_last, and an input
# or weight one column wide with channels first in memory came back channels_last where
# nn.Conv2d's is NCHW. The other cases pin the rest of that rule: a transposed (not
# contiguous) input, an input broadcast over its channels (a grey image as RGB: channel
# stride 0) and a 1x1 weight of one input channel (strides all 1) are NCHW to PyTorch.
@pytest.mark.parametrize("case", ["cropped_input", "one_column_input", "one_column_weight",
                                  "transposed_input", "channel_broadcast_input",
                                  "one_channel_1x1"])
def test_the_output_layout_follows_the_strides_nn_conv2d_reads(db_url: str, case: str) -> None:
    conv, x = _case(case)
    expected = conv(x)
    got = convert(conv, db=db_url)(x)  # the same module, parameters and all
    assert got.stride() == expected.stride()
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)
