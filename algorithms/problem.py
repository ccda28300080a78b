"""The convolution problem: one forward 2-D convolution, NCHW input, KCRS filter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: Data types a problem may name, with their size in bytes.
DTYPES: dict[str, int] = {"float16": 2, "float32": 4, "float64": 8}

#: The fields that identify a problem, in the order the database stores them.
KEY_FIELDS: tuple[str, ...] = (
    "n",
    "c",
    "h",
    "w",
    "k",
    "r",
    "s",
    "pad_h",
    "pad_w",
    "stride_h",
    "stride_w",
    "dilation_h",
    "dilation_w",
    "groups",
    "dtype",
)


def pair(value: object, name: str) -> tuple[int, int]:
    """Normalise an int or an (h, w) pair to a pair of ints; ValueError names `name`."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an int or an (h, w) pair of ints, got {value!r}")
    if isinstance(value, int):
        return (value, value)
    if (
        isinstance(value, (tuple, list))
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        return (int(value[0]), int(value[1]))
    raise ValueError(f"{name} must be an int or an (h, w) pair of ints, got {value!r}")


def _positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be positive, got {value}")


IntOrPair = int | tuple[int, int]


@dataclass(frozen=True, init=False)
class ConvProblem:
    """A forward convolution (cross-correlation) problem; immutable, hashable, the cache key.

    Input is (n, c, h, w), filter is (k, c // groups, r, s). `pad`, `stride` and `dilation`
    take an int or an (h, w) pair and are stored as pairs.
    """

    n: int
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    pad: tuple[int, int]
    stride: tuple[int, int]
    dilation: tuple[int, int]
    groups: int
    dtype: str

    def __init__(
        self,
        n: int,
        c: int,
        h: int,
        w: int,
        k: int,
        r: int,
        s: int,
        pad: IntOrPair = 0,
        stride: IntOrPair = 1,
        dilation: IntOrPair = 1,
        groups: int = 1,
        dtype: str = "float32",
    ) -> None:
        for name, value in (
            ("n", n),
            ("c", c),
            ("h", h),
            ("w", w),
            ("k", k),
            ("r", r),
            ("s", s),
            ("groups", groups),
        ):
            _positive(name, value)
            object.__setattr__(self, name, value)
        pads, strides, dilations = (
            pair(pad, "pad"),
            pair(stride, "stride"),
            pair(dilation, "dilation"),
        )
        if min(pads) < 0:
            raise ValueError(f"pad must be non-negative, got {pads}")
        if min(strides) < 1:
            raise ValueError(f"stride must be at least 1, got {strides}")
        if min(dilations) < 1:
            raise ValueError(f"dilation must be at least 1, got {dilations}")
        object.__setattr__(self, "pad", pads)
        object.__setattr__(self, "stride", strides)
        object.__setattr__(self, "dilation", dilations)
        if c % groups:
            raise ValueError(f"groups={groups} does not divide c={c}")
        if k % groups:
            raise ValueError(f"groups={groups} does not divide k={k}")
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
        object.__setattr__(self, "dtype", dtype)
        out_h, out_w = self.out_hw
        if out_h < 1 or out_w < 1:
            raise ValueError(
                f"empty output ({out_h}x{out_w}): the dilated filter "
                f"({self.dilated_r}x{self.dilated_s}) is larger than the padded input "
                f"({h + 2 * pads[0]}x{w + 2 * pads[1]})"
            )

    # --- derived sizes -------------------------------------------------------------------
    @property
    def dilated_r(self) -> int:
        """Height of the filter's footprint on the input."""
        return (self.r - 1) * self.dilation[0] + 1

    @property
    def dilated_s(self) -> int:
        """Width of the filter's footprint on the input."""
        return (self.s - 1) * self.dilation[1] + 1

    @property
    def out_hw(self) -> tuple[int, int]:
        """Output height and width."""
        out_h = (self.h + 2 * self.pad[0] - self.dilated_r) // self.stride[0] + 1
        out_w = (self.w + 2 * self.pad[1] - self.dilated_s) // self.stride[1] + 1
        return out_h, out_w

    @property
    def output_shape(self) -> tuple[int, int, int, int]:
        """(n, k, out_h, out_w)."""
        return (self.n, self.k, *self.out_hw)

    @property
    def input_shape(self) -> tuple[int, int, int, int]:
        """(n, c, h, w)."""
        return (self.n, self.c, self.h, self.w)

    @property
    def filter_shape(self) -> tuple[int, int, int, int]:
        """(k, c // groups, r, s)."""
        return (self.k, self.c // self.groups, self.r, self.s)

    @property
    def itemsize(self) -> int:
        """Bytes per element of the problem's dtype."""
        return DTYPES[self.dtype]

    @property
    def flops(self) -> int:
        """Multiply-adds counted as two FLOPs, as a direct convolution performs them."""
        out_h, out_w = self.out_hw
        return 2 * self.n * self.k * out_h * out_w * (self.c // self.groups) * self.r * self.s

    @property
    def buffer_bytes(self) -> int:
        """Bytes of the input, filter and output tensors together."""
        sizes = (self.input_shape, self.filter_shape, self.output_shape)
        return sum(a * b * c * d for a, b, c, d in sizes) * self.itemsize

    # --- identity --------------------------------------------------------------------------
    def key(self) -> dict[str, Any]:
        """The canonical field mapping stored in the database (see KEY_FIELDS)."""
        return {
            "n": self.n,
            "c": self.c,
            "h": self.h,
            "w": self.w,
            "k": self.k,
            "r": self.r,
            "s": self.s,
            "pad_h": self.pad[0],
            "pad_w": self.pad[1],
            "stride_h": self.stride[0],
            "stride_w": self.stride[1],
            "dilation_h": self.dilation[0],
            "dilation_w": self.dilation[1],
            "groups": self.groups,
            "dtype": self.dtype,
        }

    @classmethod
    def from_key(cls, key: dict[str, Any]) -> ConvProblem:
        """Rebuild a problem from `key()` output (validated again)."""
        return cls(
            n=key["n"],
            c=key["c"],
            h=key["h"],
            w=key["w"],
            k=key["k"],
            r=key["r"],
            s=key["s"],
            pad=(key["pad_h"], key["pad_w"]),
            stride=(key["stride_h"], key["stride_w"]),
            dilation=(key["dilation_h"], key["dilation_w"]),
            groups=key["groups"],
            dtype=key["dtype"],
        )

    def describe(self) -> str:
        """A short human-readable summary, e.g. for tables."""

        def fmt(p: tuple[int, int]) -> str:
            return str(p[0]) if p[0] == p[1] else f"{p[0]}x{p[1]}"

        text = (
            f"n{self.n} c{self.c} {self.h}x{self.w} -> k{self.k} {self.r}x{self.s}"
            f" p{fmt(self.pad)} s{fmt(self.stride)}"
        )
        if self.dilation != (1, 1):
            text += f" d{fmt(self.dilation)}"
        if self.groups != 1:
            text += f" g{self.groups}"
        return f"{text} {self.dtype}"
