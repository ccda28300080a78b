"""Winograd F(m x m, 3 x 3) transforms shared by every backend: matrices, tiling, limits.

Lavin and Gray (2015): y = A^T [(G g G^T) . (B^T d B)] A computes an m x m tile of a 3 x 3
cross-correlation from an (m + 2) x (m + 2) input tile d, with (m + 2)^2 multiplies instead
of 9 m^2. Summed over channels, the product becomes one GEMM per transform point
(xi, nu): M[xi, nu] = U[xi, nu] (k x c) @ V[xi, nu] (c x tiles). The transforms of F(4x4)
use the points 0, +-1, +-2 and infinity; their larger coefficients cost accuracy.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from algorithms.base import SUPPORTED, Support, unsupported
from algorithms.problem import ConvProblem


@dataclass(frozen=True)
class Transforms:
    """The three transform matrices of F(m x m, 3 x 3) as exact fractions."""

    m: int  # output tile side
    bt: tuple[tuple[Fraction, ...], ...]  # B^T, alpha x alpha
    g: tuple[tuple[Fraction, ...], ...]  # G, alpha x 3
    at: tuple[tuple[Fraction, ...], ...]  # A^T, m x alpha

    @property
    def alpha(self) -> int:
        """Input tile side, m + 2."""
        return self.m + 2

    def array(self, which: str, dtype: type[np.floating[Any]] = np.float64) -> np.ndarray:
        """One matrix ("bt", "g" or "at") as a NumPy array of `dtype`."""
        rows: tuple[tuple[Fraction, ...], ...] = getattr(self, which)
        return np.array([[float(v) for v in row] for row in rows], dtype=dtype)


def _matrix(rows: list[list[int | str]]) -> tuple[tuple[Fraction, ...], ...]:
    return tuple(tuple(Fraction(v) for v in row) for row in rows)


#: Config name -> transforms (Lavin and Gray, section 4; the same matrices as wincnn).
TRANSFORMS: dict[str, Transforms] = {
    "f2x2": Transforms(
        m=2,
        bt=_matrix([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]),
        g=_matrix([[1, 0, 0], ["1/2", "1/2", "1/2"], ["1/2", "-1/2", "1/2"], [0, 0, 1]]),
        at=_matrix([[1, 1, 1, 0], [0, 1, -1, -1]]),
    ),
    "f4x4": Transforms(
        m=4,
        bt=_matrix([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                    [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]]),
        g=_matrix([["1/4", 0, 0], ["-1/6", "-1/6", "-1/6"], ["-1/6", "1/6", "-1/6"],
                   ["1/24", "1/12", "1/6"], ["1/24", "-1/12", "1/6"], [0, 0, 1]]),
        at=_matrix([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0],
                    [0, 1, -1, 8, -8, 1]]),
    ),
}

CONFIGS: tuple[str, ...] = tuple(TRANSFORMS)


@dataclass(frozen=True)
class Tiling:
    """How a problem's output splits into m x m tiles (the last row / column may be partial)."""

    m: int
    tiles_h: int
    tiles_w: int

    @property
    def alpha(self) -> int:
        """Input tile side."""
        return self.m + 2

    def tiles(self, n: int) -> int:
        """Tiles of `n` images: the GEMM's N dimension."""
        return n * self.tiles_h * self.tiles_w


def tiling(problem: ConvProblem, config: str) -> Tiling:
    """The tiling `config` gives `problem`'s output."""
    m = TRANSFORMS[config].m
    out_h, out_w = problem.out_hw
    return Tiling(m, -(-out_h // m), -(-out_w // m))


def limits(problem: ConvProblem) -> Support:
    """3x3 filters, stride 1, dilation 1, groups 1 (any padding, any size); else why not."""
    if (problem.r, problem.s) != (3, 3):
        return unsupported(f"winograd computes 3x3 filters only, not {problem.r}x{problem.s}")
    if problem.stride != (1, 1):
        return unsupported(f"winograd needs stride 1, not {problem.stride}")
    if problem.dilation != (1, 1):
        return unsupported(f"winograd needs dilation 1, not {problem.dilation}")
    if problem.groups != 1:
        return unsupported(f"winograd needs groups == 1, not {problem.groups}")
    return SUPPORTED
