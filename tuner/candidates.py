"""Candidates: every (algorithm, config) a backend offers for a problem, with its workspace."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from algorithms.base import Algorithm
from algorithms.problem import ConvProblem
from tuner import results as R
from tuner.devices import implementation_hash
from tuner.results import AlgorithmResult


def impl_hash_of(algorithm: Algorithm, backend: str) -> str:
    """The implementation hash `algorithm`'s measurements are stored under: its own, else
    its backend's."""
    return getattr(algorithm, "impl_hash", None) or implementation_hash(backend)


@dataclass(frozen=True)
class Candidate:
    """One algorithm configuration, with its workspace for the problem at hand."""

    algorithm: Algorithm
    config: str
    workspace_bytes: int
    impl_hash: str

    @property
    def key(self) -> tuple[str, str]:
        """(algorithm name, config): unique within one find."""
        return (self.algorithm.name, self.config)


def validate_workspace_limit(limit: Any) -> int | None:
    """None (no limit) or a non-negative int of bytes."""
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)):
        raise ValueError(f"workspace_limit must be a whole number of bytes or None, got {limit!r}")
    if limit < 0:
        raise ValueError(f"workspace_limit must be non-negative, got {limit}")
    return int(limit)


# Algorithms are stateless, so a problem's candidates never change for one set of them; a
# cached find would otherwise spend a fifth of its time enumerating configs and workspaces.
@functools.lru_cache(maxsize=4096)
def enumerate_candidates(
    algorithms: tuple[Algorithm, ...], problem: ConvProblem, backend: str
) -> tuple[tuple[Candidate, ...], tuple[AlgorithmResult, ...]]:
    """Supported configurations, and an `unsupported` result per algorithm that is not."""
    candidates: list[Candidate] = []
    unsupported: list[AlgorithmResult] = []
    for algorithm in algorithms:
        support = algorithm.supports(problem)
        if not support:
            unsupported.append(AlgorithmResult(
                algorithm=algorithm.name, config="", status=R.UNSUPPORTED,
                time_ms=None, workspace_bytes=0, error=support.reason,
            ))
            continue
        digest = impl_hash_of(algorithm, backend)
        for config in algorithm.configs(problem):
            candidates.append(Candidate(
                algorithm, config, algorithm.workspace_bytes(problem, config), digest
            ))
    return tuple(candidates), tuple(unsupported)


def within_limit(
    candidates: Sequence[Candidate], workspace_limit: int | None
) -> tuple[list[Candidate], list[AlgorithmResult]]:
    """The candidates that fit `workspace_limit`, and an over-the-limit result per other."""
    allowed: list[Candidate] = []
    over: list[AlgorithmResult] = []
    for cand in candidates:
        if workspace_limit is not None and cand.workspace_bytes > workspace_limit:
            over.append(AlgorithmResult(
                algorithm=cand.algorithm.name, config=cand.config,
                status=R.OVER_WORKSPACE_LIMIT, time_ms=None,
                workspace_bytes=cand.workspace_bytes,
                error=f"needs {cand.workspace_bytes} bytes of workspace, "
                      f"limit is {workspace_limit}",
            ))
        else:
            allowed.append(cand)
    return allowed, over
