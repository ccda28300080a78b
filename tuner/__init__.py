"""convtune: pick the fastest convolution algorithm for a problem on a device, and run it."""

from algorithms.problem import ConvProblem
from algorithms.runtime import TimingPolicy
from tuner.api import (
    Convolution,
    convolve,
    convolve_backward_data,
    convolve_backward_filter,
    find_algorithms,
    find_best_algorithm,
    plan,
    problem_for,
    run_convolution,
)
from tuner.errors import NotInDatabase, NoUsableAlgorithm
from tuner.plans import Plan
from tuner.results import AlgorithmResult
from tuner.service import StoreReadOnly
from tuner.tuning import Tuner

__all__ = [
    "AlgorithmResult",
    "ConvProblem",
    "Convolution",
    "NoUsableAlgorithm",
    "NotInDatabase",
    "Plan",
    "StoreReadOnly",
    "TimingPolicy",
    "Tuner",
    "convolve",
    "convolve_backward_data",
    "convolve_backward_filter",
    "find_algorithms",
    "find_best_algorithm",
    "plan",
    "problem_for",
    "run_convolution",
]
