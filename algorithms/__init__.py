"""Convolution algorithms behind one interface, per backend, in one append-only registry."""

from algorithms.base import DEFAULT_CONFIG, SUPPORTED, Algorithm, Support, unsupported
from algorithms.problem import DTYPES, ConvProblem
from algorithms.registry import ALGORITHM_NAMES, algorithms_for, get_algorithm, register

__all__ = [
    "ALGORITHM_NAMES",
    "DEFAULT_CONFIG",
    "DTYPES",
    "SUPPORTED",
    "Algorithm",
    "ConvProblem",
    "Support",
    "algorithms_for",
    "get_algorithm",
    "register",
    "unsupported",
]
