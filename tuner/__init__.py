"""convtune: pick the fastest convolution algorithm for a problem on a device, and run it."""

from algorithms.problem import ConvProblem
from tuner.api import (
    Convolution,
    convolve,
    find_algorithms,
    find_best_algorithm,
    problem_for,
    run_convolution,
)
from tuner.results import AlgorithmResult
from tuner.runtime import TimingPolicy
from tuner.tuning import NotInDatabase, NoUsableAlgorithm, Tuner

__all__ = [
    "AlgorithmResult",
    "ConvProblem",
    "Convolution",
    "NoUsableAlgorithm",
    "NotInDatabase",
    "TimingPolicy",
    "Tuner",
    "convolve",
    "find_algorithms",
    "find_best_algorithm",
    "problem_for",
    "run_convolution",
]
