"""The find modes every front end offers, and the size of a fast find."""

from __future__ import annotations

#: The find modes (stored in no table, but part of every front end: add, never rename).
#: auto: the store, then measure every missing candidate; exhaustive: the same (cuDNN's and
#: MIOpen's name for it); tune: measure every candidate again; cached: never measure, borrow
#: from other devices or predict; fast: the store, then measure only what
#: tuner.predicting.fast_picks takes of the prediction (the top `fast_k`, the best of each
#: of the `fast_k` best families, and of every other family of the algorithms so chosen),
#: then the configurations predicted close to the best of each family that came within
#: RUNNER_UP of the winner (predicting.round_two); heuristic: never measure, predict.
MODES = ("cached", "tune", "auto", "exhaustive", "fast", "heuristic")
#: Default number of candidates a fast find measures ($CONVTUNE_FAST_K).
FAST_K = 4


def check_mode(mode: object) -> str:
    """A find mode, "exhaustive" read as its synonym "auto"; ValueError for anything else."""
    if not isinstance(mode, str) or mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    return "auto" if mode == "exhaustive" else mode
