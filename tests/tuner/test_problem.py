"""ConvProblem: validation that names the field, derived sizes, identity."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import numpy as np
import pytest

from algorithms.problem import ConvProblem


def test_output_shape_and_pairs() -> None:
    p = ConvProblem(n=8, c=64, h=56, w=56, k=64, r=3, s=3, pad=1, stride=1, dilation=1)
    assert p.output_shape == (8, 64, 56, 56)
    assert p.pad == (1, 1) and p.stride == (1, 1) and p.dilation == (1, 1)
    q = ConvProblem(
        n=1, c=3, h=224, w=200, k=64, r=7, s=5, pad=(3, 2), stride=(2, 3), dilation=(1, 2)
    )
    # out = (h + 2p - ((r-1)d + 1)) // stride + 1
    assert q.output_shape == (1, 64, (224 + 6 - 7) // 2 + 1, (200 + 4 - 9) // 3 + 1)


@pytest.mark.parametrize("geometry, expected", [
    (dict(r=1, s=1), True),
    (dict(r=1, s=1, dilation=3), True),  # a 1x1 filter has no taps to spread
    (dict(r=1, s=1, pad=(0, 1)), False),
    (dict(r=1, s=1, stride=(1, 2)), False),
    (dict(r=1, s=3), False),
])
def test_pointwise(geometry: dict[str, Any], expected: bool) -> None:
    p = ConvProblem(**{"n": 2, "c": 4, "h": 5, "w": 6, "k": 3, **geometry})
    assert p.pointwise is expected


def test_hashable_and_equal_for_int_or_pair() -> None:
    a = ConvProblem(n=1, c=2, h=5, w=5, k=2, r=3, s=3, pad=1)
    b = ConvProblem(n=1, c=2, h=5, w=5, k=2, r=3, s=3, pad=(1, 1))
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    with pytest.raises(AttributeError):
        a.n = 3  # type: ignore[misc]


def test_key_round_trip() -> None:
    p = ConvProblem(
        n=2,
        c=8,
        h=9,
        w=11,
        k=4,
        r=3,
        s=1,
        pad=(1, 0),
        stride=(2, 1),
        dilation=(1, 1),
        groups=2,
        dtype="float64",
    )
    assert ConvProblem.from_key(p.key()) == p


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        (dict(n=0), "n"),
        (dict(c=-1), "c"),
        (dict(h=0), "h"),
        (dict(k=0), "k"),
        (dict(r=0), "r"),
        (dict(groups=0), "groups"),
        (dict(groups=3), "groups"),
        (dict(c=4, k=6, groups=4), "groups"),
        (dict(dtype="int8"), "dtype"),
        (dict(stride=0), "stride"),
        (dict(dilation=(1, 0)), "dilation"),
        (dict(pad=-1), "pad"),
        (dict(pad=(1, 2, 3)), "pad"),
        (dict(r=9, h=5), "empty output"),
        (dict(n=1.5), "n"),
    ],
)
def test_invalid_problems_name_the_field(kwargs: dict, field: str) -> None:
    args: dict[str, Any] = dict(n=1, c=4, h=6, w=6, k=4, r=3, s=3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=field):
        ConvProblem(**args)


def test_filter_as_large_as_padded_input_is_valid() -> None:
    p = ConvProblem(n=1, c=1, h=5, w=4, k=1, r=7, s=6, pad=1)
    assert p.out_hw == (1, 1)


def test_flops_counts_multiply_adds_twice() -> None:
    p = ConvProblem(n=2, c=4, h=5, w=5, k=6, r=3, s=3, pad=1, groups=2)
    assert p.flops == 2 * 2 * 6 * 5 * 5 * 2 * 3 * 3


BASE: dict[str, Any] = dict(n=1, c=4, h=8, w=8, k=4, r=3, s=3)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        # Issue 12 (3): sizes without an upper bound ended in MemoryError or OverflowError.
        (dict(n=10**9), "n must be at most"),
        (dict(pad=10**6), "pad must be at most"),
        (dict(n=2**70), "n must be at most"),
        (dict(n=4096, c=4096, h=4096, w=4096), "input tensor"),
        # Issue 12 (9): dtype=[] raised TypeError (unhashable) instead of a ValueError.
        (dict(dtype=[]), "dtype must be one of"),
        (dict(math="fp16"), "math must be one of"),
        (dict(math="tf32", dtype="float16"), "applies to float32 only"),
        (dict(stride=np.bool_(True)), "stride must be an int"),
    ],
)
def test_out_of_bounds_and_mistyped_fields_are_value_errors(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        ConvProblem(**{**BASE, **kwargs})


def test_numpy_integers_are_accepted() -> None:
    # Issue 12 (9): NumPy integer scalars for padding, stride and groups were refused.
    p = ConvProblem(**{**BASE, "c": np.int64(4), "k": np.int32(4)}, pad=np.int64(1),
                    stride=(np.int32(1), 1), groups=np.int64(2))
    assert p == ConvProblem(**BASE, pad=1, groups=2)
    assert all(type(v) is int for v in (p.c, p.k, p.groups, *p.pad, *p.stride))


def test_math_is_part_of_the_key_and_old_keys_mean_fp32() -> None:
    fp32 = ConvProblem(**BASE)
    tf32 = ConvProblem(**BASE, math="tf32")
    assert fp32 != tf32 and fp32.key() != tf32.key()
    assert ConvProblem.from_key(tf32.key()) == tf32
    old_key = {f: v for f, v in fp32.key().items() if f != "math"}
    assert ConvProblem.from_key(old_key) == fp32
    assert tf32.describe().endswith("float32 tf32")


def test_bfloat16_is_a_two_byte_dtype() -> None:
    p = ConvProblem(**BASE, dtype="bfloat16")
    assert p.itemsize == 2
    assert np.dtype(p.dtype).itemsize == 2  # ml_dtypes registers the name with NumPy


def test_the_cached_hash_stays_out_of_pickles() -> None:
    # ConvProblem remembers its hash; string hashes differ between processes (hash
    # randomisation), so a hash carried in a pickle would break dict lookups in the next one.
    problem = ConvProblem(n=2, c=4, h=9, w=8, k=6, r=3, s=3, pad=1, dtype="float16")
    assert hash(problem) == hash(problem)
    restored = pickle.loads(pickle.dumps(problem))
    assert "_hash" not in restored.__dict__
    assert restored == problem and {problem: 1}[restored] == 1
    assert dataclasses.replace(problem, k=7) != problem
    assert hash(dataclasses.replace(problem, k=6)) == hash(problem)


# Mutation gap: Python bools (True == 1 to operator.index) were accepted as sizes and pairs.
@pytest.mark.parametrize("kwargs", [dict(n=True), dict(groups=False), dict(pad=True),
                                    dict(stride=(1, True))])
def test_python_bools_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="must be an int"):
        ConvProblem(**{**BASE, **kwargs})


# Mutation gap: the message for a pair with a non-integer element (it must show the pair
# given, not a None from inside it).
def test_a_pair_with_a_bad_element_is_named_whole() -> None:
    with pytest.raises(ValueError, match=r"pad must be an int or an \(h, w\) pair of ints, "
                                         r"got \(1, 1\.5\)"):
        ConvProblem(**BASE, pad=(1, 1.5))  # type: ignore[arg-type]


# Mutation gap: the bounds in LIMITS are inclusive; only values far above them were tried.
_AT_LIMIT: dict[str, dict[str, Any]] = {
    "n": dict(n=2**24), "c": dict(c=2**24, k=1), "h": dict(h=2**24), "w": dict(w=2**24),
    "k": dict(k=2**24), "groups": dict(c=2**24, k=2**24, groups=2**24),
    "r": dict(h=2**16, r=2**16), "s": dict(w=2**16, s=2**16), "pad": dict(pad=2**16),
    "stride": dict(stride=2**16), "dilation": dict(h=2**17 + 1, w=2**17 + 1, dilation=2**16),
}


@pytest.mark.parametrize("field", sorted(_AT_LIMIT))
def test_limits_are_inclusive(field: str) -> None:
    from algorithms.problem import LIMITS

    at_limit = {**BASE, **_AT_LIMIT[field]}
    p = ConvProblem(**at_limit)
    value = getattr(p, field)
    assert value in (LIMITS[field], (LIMITS[field],) * 2)
    over = {**at_limit, field: LIMITS[field] + 1}  # groups: bounded before divisibility
    with pytest.raises(ValueError, match=f"{field} must be at most {LIMITS[field]}"):
        ConvProblem(**over)
    assert sorted(_AT_LIMIT) == sorted(LIMITS)


# Mutation gap: 2**40 elements is the largest tensor allowed (inclusive), and the filter and
# output tensors are bounded too, not only the input.
@pytest.mark.parametrize(("kwargs", "tensor"), [
    (dict(n=2**16 + 1, c=2**24, h=1, w=1, k=1), "input"),
    (dict(n=1, c=2**24, h=1, w=1, k=2**17), "filter"),
    (dict(n=2**17, c=1, h=1, w=1, k=2**24), "output"),
])
def test_every_tensor_is_bounded_at_2_to_the_40(kwargs: dict[str, Any], tensor: str) -> None:
    exact = ConvProblem(n=2**16, c=2**24, h=1, w=1, k=1, r=1, s=1)
    assert int(np.prod(exact.input_shape)) == 2**40
    with pytest.raises(ValueError, match=f"the {tensor} tensor .* more than 2\\*\\*40"):
        ConvProblem(**kwargs, r=1, s=1)


# Mutation gap: "tf32" on bfloat16 and float64, an unknown direction, and an output empty in
# width only were accepted by mutants without a failing test (the last only by a random one).
@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(math="tf32", dtype="bfloat16"), "applies to float32 only"),
    (dict(math="tf32", dtype="float64"), "applies to float32 only"),
    (dict(direction="sideways"), "direction must be one of"),
    (dict(direction=None), "direction must be one of"),
    (dict(w=5, s=9), r"empty output \(6x-3\)"),
])
def test_more_invalid_fields_are_value_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ConvProblem(**{**BASE, **kwargs})


# Mutation gap: operand_names and buffer_bytes had no test.
def test_operand_names_and_buffer_bytes() -> None:
    names = {d: ConvProblem(**BASE, direction=d).operand_names
             for d in ("forward", "backward_data", "backward_filter")}
    assert names == {"forward": ("x", "w", "y"), "backward_data": ("dy", "w", "dx"),
                     "backward_filter": ("x", "dy", "dw")}
    p = ConvProblem(n=2, c=4, h=5, w=6, k=6, r=3, s=3, pad=1, groups=2, dtype="float16")
    # x 2*4*5*6 = 240, w 6*2*3*3 = 108, y 2*6*5*6 = 360 elements of 2 bytes.
    assert p.buffer_bytes == (240 + 108 + 360) * 2


# Mutation gap: keys without "direction" (older bundles) mean forward; the key's field
# order is KEY_FIELDS (the database's column order); dilation_w round-trips.
def test_old_keys_and_key_order() -> None:
    from algorithms.problem import KEY_FIELDS

    p = ConvProblem(**BASE, pad=(2, 1), dilation=(1, 2), direction="backward_filter",
                    math="tf32")
    assert tuple(p.key()) == KEY_FIELDS
    assert ConvProblem.from_key(p.key()) == p
    forward = ConvProblem(**BASE, dilation=(1, 2))
    old = {f: v for f, v in forward.key().items() if f not in ("math", "direction")}
    assert ConvProblem.from_key(old) == forward


# Mutation gap: describe() (tables, logs) had no test of its pairs, dilation, groups or
# direction.
def test_describe_names_every_non_default_field() -> None:
    p = ConvProblem(n=2, c=8, h=9, w=11, k=4, r=3, s=1, pad=(1, 0), stride=(2, 1),
                    dilation=(1, 2), groups=2, dtype="float16", direction="backward_data")
    assert p.describe() == "n2 c8 9x11 -> k4 3x1 p1x0 s2x1 d1x2 g2 float16 backward_data"
    assert ConvProblem(**BASE).describe() == "n1 c4 8x8 -> k4 3x3 p0 s1 float32"
    assert ConvProblem(**BASE, dilation=3, stride=2).describe() == (
        "n1 c4 8x8 -> k4 3x3 p0 s2 d3 float32")

