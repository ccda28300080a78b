"""The timing policy read from $CONVTUNE_* (tuner.env.timing_policy)."""

from __future__ import annotations

import pytest

from algorithms.runtime import TimingPolicy
from tuner.env import timing_policy


def test_the_variables_override_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in (("CONVTUNE_WARMUP", "2"), ("CONVTUNE_BUDGET_S", "0.5"),
                        ("CONVTUNE_MIN_REPS", "4"), ("CONVTUNE_MAX_REPS", "9"),
                        ("CONVTUNE_BATCH_BELOW_MS", "0.25")):
        monkeypatch.setenv(name, value)
    assert timing_policy() == TimingPolicy(warmup=2, budget_s=0.5, min_reps=4, max_reps=9,
                                           batch_below_ms=0.25)
    for name in ("CONVTUNE_WARMUP", "CONVTUNE_BUDGET_S", "CONVTUNE_MIN_REPS",
                 "CONVTUNE_MAX_REPS", "CONVTUNE_BATCH_BELOW_MS"):
        monkeypatch.delenv(name)
    assert timing_policy() == TimingPolicy()


# Bug: a bad value said "bad CONVTUNE_* timing variable" without naming which of the five,
# CONVTUNE_MIN_REPS=0 printed the policy's repr, and CONVTUNE_BUDGET_S=nan was accepted
# (a NaN budget compares false with every time spent: never reached).
@pytest.mark.parametrize(("name", "value", "message"), [
    ("CONVTUNE_BUDGET_S", "abc", r"^\$CONVTUNE_BUDGET_S must be a number, got 'abc'$"),
    ("CONVTUNE_BUDGET_S", "nan", r"^\$CONVTUNE_BUDGET_S must be finite, got 'nan'$"),
    ("CONVTUNE_BATCH_BELOW_MS", "-inf", r"^\$CONVTUNE_BATCH_BELOW_MS must be finite"),
    ("CONVTUNE_MIN_REPS", "0", r"^\$CONVTUNE_MIN_REPS must be positive, got '0'$"),
    ("CONVTUNE_WARMUP", "1.5", r"^\$CONVTUNE_WARMUP must be an integer, got '1.5'$"),
    ("CONVTUNE_MIN_REPS", "10",
     r"^\$CONVTUNE_MAX_REPS \(5\) must be at least \$CONVTUNE_MIN_REPS \(10\)$"),
])
def test_a_bad_variable_is_named_in_one_line(monkeypatch: pytest.MonkeyPatch, name: str,
                                             value: str, message: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=message):
        timing_policy()


def test_the_policy_itself_refuses_nan_budgets() -> None:
    with pytest.raises(ValueError, match="must be finite and non-negative"):
        TimingPolicy(budget_s=float("nan"))
    with pytest.raises(ValueError, match=r"^min_reps \(0\) must be at least 1"):
        TimingPolicy(min_reps=0)
