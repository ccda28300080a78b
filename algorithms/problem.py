"""The convolution problem: one forward 2-D convolution, NCHW input, KCRS filter."""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from typing import Any, SupportsIndex

# NumPy has no bfloat16; importing ml_dtypes registers one, so np.dtype("bfloat16") works
# wherever a problem's dtype name is turned into an array dtype.
import ml_dtypes  # noqa: F401
import numpy as np

#: Data types a problem may name, with their size in bytes. float16 and bfloat16 are
#: storage types: every algorithm accumulates them in float32.
DTYPES: dict[str, int] = {"float16": 2, "float32": 4, "float64": 8, "bfloat16": 2}

#: Arithmetic a caller accepts (`ConvProblem.math`). "fp32": FP32-accurate (relative error
#: about 1e-5 against float64). "tf32": TF32 tensor cores allowed (about 1e-3), like
#: PyTorch's `allow_tf32`; only float32 problems have a choice, so only they may ask for it.
MATHS: tuple[str, ...] = ("fp32", "tf32")

#: Which tensor a problem computes. forward: y from (x, w); backward_data: dx from (dy, w), a
#: transposed convolution; backward_filter: dw from (x, dy), summed over the batch. The
#: geometry (shapes, pad, stride, ...) is always the forward convolution's.
DIRECTIONS: tuple[str, ...] = ("forward", "backward_data", "backward_filter")

#: Key fields added after the first release, with the value older keys mean.
KEY_DEFAULTS: dict[str, str] = {"math": "fp32", "direction": "forward"}

#: Upper bounds of each field: far beyond any real network (and inside the store's 32-bit
#: columns), yet a typo like n=10**9 or pad=10**6 is refused before anything is allocated.
#: The HTTP schema uses the same bounds; its settings bound the sizes of whole tensors.
LIMITS: dict[str, int] = {
    **dict.fromkeys(("n", "c", "h", "w", "k", "groups"), 2**24),
    **dict.fromkeys(("r", "s", "pad", "stride", "dilation"), 2**16),
}
#: Largest tensor (input, filter or output) of a problem, in elements: 2**40 keeps every
#: byte count an algorithm derives from it (FFT spectra included) far inside int64.
MAX_TENSOR_ELEMENTS = 2**40

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
    "math",
    "direction",
)


def as_int(value: object) -> int | None:
    """`value` as a Python int when it is an integer (NumPy's included, bools not), else None."""
    # np.bool_ by type: its name is "bool" since NumPy 2, and NumPy before 2.3 (the last for
    # Python 3.10) still gives operator.index of one as 0 or 1, with a DeprecationWarning.
    if isinstance(value, (bool, np.bool_)):
        return None
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return None


def pair(value: object, name: str) -> tuple[int, int]:
    """Normalise an int or an (h, w) pair to a pair of ints; ValueError names `name`."""
    single = as_int(value)
    if single is not None:
        return (single, single)
    if isinstance(value, (tuple, list)) and len(value) == 2:
        h, w = as_int(value[0]), as_int(value[1])
        if h is not None and w is not None:
            return (h, w)
    raise ValueError(f"{name} must be an int or an (h, w) pair of ints, got {value!r}")


#: "P", "PH,PW", "PHxPW" or "[PH, PW]": how a pair is written on a command line or a form.
_PAIR_TEXT = re.compile(r"^\s*[\[(]?\s*(-?\d{1,9})\s*(?:[,x]\s*(-?\d{1,9})\s*)?[\])]?\s*$")


def parse_pair(text: str, name: str) -> tuple[int, int]:
    """'1' -> (1, 1); '1,2', '1x2' or '[1, 2]' -> (1, 2); ValueError names `name`."""
    match = _PAIR_TEXT.match(text)
    if match is None:
        raise ValueError(f"{name} must be an int or 'H,W', got {text[:40]!r}")
    first = int(match.group(1))
    return (first, int(match.group(2)) if match.group(2) is not None else first)


def _bounded(name: str, value: object, low: int, wording: str = "positive") -> int:
    number = as_int(value)
    if number is None:
        raise ValueError(f"{name} must be an int, got {value!r}")
    if number < low:
        raise ValueError(f"{name} must be {wording}, got {number}")
    if number > LIMITS[name]:
        raise ValueError(f"{name} must be at most {LIMITS[name]}, got {number}")
    return number


#: NumPy integers are accepted wherever an int is (anything with __index__ but a bool).
IntOrPair = SupportsIndex | tuple[SupportsIndex, SupportsIndex]


@dataclass(frozen=True, init=False)
class ConvProblem:
    """A forward convolution (cross-correlation) problem; immutable, hashable, the cache key.

    Input is (n, c, h, w), filter is (k, c // groups, r, s). `pad`, `stride` and `dilation`
    take an int or an (h, w) pair and are stored as pairs. Integers may be NumPy integers.
    `math` is the arithmetic the caller accepts (see MATHS); `direction` which tensor is
    computed (see DIRECTIONS and `operand_shapes`).
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
    math: str
    direction: str

    def __init__(
        self,
        n: SupportsIndex,
        c: SupportsIndex,
        h: SupportsIndex,
        w: SupportsIndex,
        k: SupportsIndex,
        r: SupportsIndex,
        s: SupportsIndex,
        pad: IntOrPair = 0,
        stride: IntOrPair = 1,
        dilation: IntOrPair = 1,
        groups: SupportsIndex = 1,
        dtype: str = "float32",
        math: str = "fp32",
        direction: str = "forward",
    ) -> None:
        dims = dict(n=n, c=c, h=h, w=w, k=k, r=r, s=s, groups=groups)
        for name, value in dims.items():
            object.__setattr__(self, name, _bounded(name, value, 1))
        pairs: dict[str, tuple[IntOrPair, int, str]] = {
            "pad": (pad, 0, "non-negative"), "stride": (stride, 1, "at least 1"),
            "dilation": (dilation, 1, "at least 1"),
        }
        for field, (given, low, wording) in pairs.items():
            both = tuple(_bounded(field, v, low, wording) for v in pair(given, field))
            object.__setattr__(self, field, both)
        if self.c % self.groups:
            raise ValueError(f"groups={self.groups} does not divide c={self.c}")
        if self.k % self.groups:
            raise ValueError(f"groups={self.groups} does not divide k={self.k}")
        if not isinstance(dtype, str) or dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
        object.__setattr__(self, "dtype", dtype)
        if not isinstance(math, str) or math not in MATHS:
            raise ValueError(f"math must be one of {list(MATHS)}, got {math!r}")
        if math != "fp32" and dtype != "float32":
            raise ValueError(f"math={math!r} applies to float32 only, not {dtype}")
        object.__setattr__(self, "math", math)
        if not isinstance(direction, str) or direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {list(DIRECTIONS)}, got {direction!r}")
        object.__setattr__(self, "direction", direction)
        out_h, out_w = self.out_hw
        if out_h < 1 or out_w < 1:
            raise ValueError(
                f"empty output ({out_h}x{out_w}): the dilated filter "
                f"({self.dilated_r}x{self.dilated_s}) is larger than the padded input "
                f"({self.h + 2 * self.pad[0]}x{self.w + 2 * self.pad[1]})"
            )
        for name, shape in (("input", self.input_shape), ("filter", self.filter_shape),
                            ("output", self.output_shape)):
            if shape[0] * shape[1] * shape[2] * shape[3] > MAX_TENSOR_ELEMENTS:
                raise ValueError(
                    f"the {name} tensor {shape} has more than 2**40 elements"
                )

    # Hashed once per object: problems key the memos on every run and plan call (workspace
    # sizes, launch grids, kernel arguments), where hashing all fields each time cost
    # microseconds. The cached hash stays out of pickles: string hashes differ between
    # processes.
    def __hash__(self) -> int:
        found = self.__dict__.get("_hash")
        if found is None:
            found = hash((self.n, self.c, self.h, self.w, self.k, self.r, self.s, self.pad,
                          self.stride, self.dilation, self.groups, self.dtype, self.math,
                          self.direction))
            object.__setattr__(self, "_hash", found)
        return found  # type: ignore[no-any-return]

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

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
    def pointwise(self) -> bool:
        """A 1x1 filter at stride 1 without padding: an image is its own column matrix."""
        return (self.r, self.s, self.stride, self.pad) == (1, 1, (1, 1), (0, 0))

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
    def operand_shapes(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """Shapes of what an algorithm reads (a, b) and writes (out), for the direction.

        forward: (x, w) -> y; backward_data: (dy, w) -> dx; backward_filter: (x, dy) -> dw.
        """
        x, w, y = self.input_shape, self.filter_shape, self.output_shape
        if self.direction == "backward_data":
            return y, w, x
        if self.direction == "backward_filter":
            return x, y, w
        return x, w, y

    @property
    def operand_names(self) -> tuple[str, str, str]:
        """Names of (a, b, out) for messages: ("x", "w", "y") going forward."""
        return {"backward_data": ("dy", "w", "dx"),
                "backward_filter": ("x", "dy", "dw")}.get(self.direction, ("x", "w", "y"))

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
            "math": self.math,
            "direction": self.direction,
        }

    @classmethod
    def from_key(cls, key: dict[str, Any]) -> ConvProblem:
        """Rebuild a problem from `key()` output (validated again).

        Fields of KEY_DEFAULTS missing from older keys (bundles, clients) take their default.
        """
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
            math=key.get("math", KEY_DEFAULTS["math"]),
            direction=key.get("direction", KEY_DEFAULTS["direction"]),
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
        text += f" {self.dtype}"
        if self.math != "fp32":
            text += f" {self.math}"
        return text if self.direction == "forward" else f"{text} {self.direction}"
