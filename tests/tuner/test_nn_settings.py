"""What the PyTorch module adds to nn.Conv2d (a workspace limit, a store) and what it keeps
of it (its constructor, its text), as convert and the constructor set them (CPU; nn.Conv2d
the oracle, float64 where numbers are compared)."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from tuner.nn import Conv2d, convert  # noqa: E402

ARGS: dict[str, Any] = dict(stride=2, padding=1, dilation=2, groups=2, bias=False)


# Mutation gap: a module with neither a workspace limit nor a store prints as nn.Conv2d
# does (nothing added: no "workspace_limit=None", no "db=None"), and one with either keeps
# nn.Conv2d's text before what it adds.
def test_the_text_is_nn_conv2d_s_and_what_was_set(tmp_path: Any) -> None:
    theirs = repr(nn.Conv2d(4, 6, 3, **ARGS))
    assert repr(Conv2d(4, 6, 3, **ARGS)) == theirs
    assert repr(convert(nn.Conv2d(4, 6, 3, **ARGS))) == theirs
    assert repr(Conv2d(4, 6, 3, workspace_limit=1024, **ARGS)) == (
        theirs[:-1] + ", workspace_limit=1024)")
    db = f"sqlite:///{tmp_path / 'own.db'}"
    assert repr(Conv2d(4, 6, 3, db=db, **ARGS)) == theirs[:-1] + f", db={db!r})"


# Mutation gap: torch.fx.symbolic_trace records the module's own workspace limit (only
# "no limit", -1, was checked).
def test_fx_records_the_module_s_workspace_limit(db_url: str) -> None:
    reference = nn.Conv2d(4, 6, 3, padding=1).double()
    ours = convert(nn.Conv2d(4, 6, 3, padding=1).double(), workspace_limit=4096, db=db_url)
    ours.load_state_dict(reference.state_dict())
    graph = torch.fx.symbolic_trace(ours)
    (node,) = [n for n in graph.graph.nodes if n.target == torch.ops.convtune.conv2d.default]
    assert node.args[7:] == (4096, db_url)
    x = torch.randn(2, 4, 7, 6, dtype=torch.float64)
    torch.testing.assert_close(graph(x), reference(x), rtol=1e-9, atol=1e-9)


# Mutation gap: convert checks its workspace limit itself, also for a model with no
# nn.Conv2d to swap (only a swapped module's own check refused a bad one).
@pytest.mark.parametrize("limit", [-1, "1GB", True])
def test_convert_refuses_a_bad_limit_with_nothing_to_swap(limit: Any, db_url: str) -> None:
    model = nn.Sequential(nn.Linear(3, 2), nn.ReLU())
    with pytest.raises(ValueError, match=r"^workspace_limit must be"):
        convert(model, workspace_limit=limit, db=db_url)


# Mutation gap: the constructor passes dtype on to nn.Conv2d (only device was checked):
# a float64 module made so is float64 and exact.
def test_the_constructor_makes_parameters_of_the_dtype_asked(db_url: str) -> None:
    ours = Conv2d(4, 6, 3, padding=1, dtype=torch.float64, db=db_url)
    assert ours.bias is not None
    assert ours.weight.dtype == ours.bias.dtype == torch.float64
    reference = nn.Conv2d(4, 6, 3, padding=1, dtype=torch.float64)
    reference.load_state_dict(ours.state_dict())
    x = torch.randn(2, 4, 7, 6, dtype=torch.float64)
    torch.testing.assert_close(ours(x), reference(x), rtol=1e-9, atol=1e-9)


# Mutation gap: a layer with no output channels (a weight with no elements, which
# nn.Conv2d builds but refuses to run) raises PyTorch's own error, as nn.Conv2d does, in
# inference and in training; not convtune's refusal of a problem with no filters.
@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors is a no-op")
def test_no_output_channels_raise_nn_conv2d_s_error(db_url: str) -> None:
    reference = nn.Conv2d(4, 0, 3, padding=1).double()
    ours = convert(nn.Conv2d(4, 0, 3, padding=1).double(), db=db_url)
    x = torch.randn(2, 4, 7, 6, dtype=torch.float64, requires_grad=True)
    with pytest.raises(RuntimeError) as theirs:
        reference(x)
    for grad in (False, True):
        with torch.set_grad_enabled(grad), pytest.raises(RuntimeError) as raised:
            ours(x)
        assert str(raised.value) == str(theirs.value)
