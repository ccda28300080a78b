"""How candidates race while they are timed (tuner.measuring), and which of them a
confirmation round re-times: the policy, from the environment, and the choice."""

from __future__ import annotations

from dataclasses import dataclass, replace

from algorithms.runtime import TimingPolicy
from db.rows import MeasurementRow
from tuner import results as R
from tuner.env import env_number

#: Default race factor ($CONVTUNE_RACE_FACTOR), confirmation size ($CONVTUNE_CONFIRM_TOP),
#: and most samples of the screening pass ($CONVTUNE_SCREEN_REPS) and of the confirmation
#: round ($CONVTUNE_CONFIRM_REPS).
RACE_FACTOR = 1.5
CONFIRM_TOP = 3
# On an H100 (2026-11-23) tuning a ResNet-50 layer took about 30 ms per candidate (17-19 of
# them), for kernels of 0.06-0.3 ms: by the policy's arithmetic mostly the max_reps samples
# of the candidates near the leader, whose best the confirmation round re-times anyway.
SCREEN_REPS = 10
# The round's samples per candidate. A launch-bound candidate's sample is about 0.5 ms of
# GPU time (TimingPolicy.batch_below_ms), so the round's shared budget let each of the three
# take max_reps (50): in the H200 profile of a fast ResNet-50 tuning (2026-11-27) about half
# of the 5,470 samples and 2.7 s of sampling were the round's. The median of 20 interleaved
# samples is steady enough for what the round decides: one configuration's pass-to-pass
# spread there was 0.2% (median), and its ties are judged against 1%.
CONFIRM_REPS = 20


@dataclass(frozen=True)
class RacePolicy:
    """How candidates race, and how many of the best are confirmed at the end."""

    # "Clearly worse": a fastest run beyond factor x the leader's median. The same factor
    # bounds who enters the confirmation round.
    factor: float = RACE_FACTOR
    confirm_top: int = CONFIRM_TOP  # fewer than 2: no confirmation round
    # Most samples per candidate in a first pass that a confirmation round follows, and in
    # that round (never fewer than the timing policy's min_reps).
    screen_reps: int = SCREEN_REPS
    confirm_reps: int = CONFIRM_REPS

    @classmethod
    def from_env(cls) -> RacePolicy:
        """Defaults, overridden by $CONVTUNE_RACE_FACTOR, $CONVTUNE_CONFIRM_TOP,
        $CONVTUNE_SCREEN_REPS and $CONVTUNE_CONFIRM_REPS."""
        return cls(factor=env_number("CONVTUNE_RACE_FACTOR", RACE_FACTOR, float, positive=True),
                   confirm_top=env_number("CONVTUNE_CONFIRM_TOP", CONFIRM_TOP, int),
                   screen_reps=env_number("CONVTUNE_SCREEN_REPS", SCREEN_REPS, int,
                                          positive=True),
                   confirm_reps=env_number("CONVTUNE_CONFIRM_REPS", CONFIRM_REPS, int,
                                           positive=True))

    def __post_init__(self) -> None:
        if not self.factor >= 1:
            raise ValueError(f"race factor must be at least 1, got {self.factor}")
        if self.confirm_top < 0:
            raise ValueError(f"confirm_top must be non-negative, got {self.confirm_top}")
        if self.screen_reps < 1:
            raise ValueError(f"screen_reps must be at least 1, got {self.screen_reps}")
        if self.confirm_reps < 1:
            raise ValueError(f"confirm_reps must be at least 1, got {self.confirm_reps}")

    def first_pass(self, policy: TimingPolicy, candidates: int) -> TimingPolicy:
        """`policy` for the first pass over `candidates`: capped at screen_reps samples
        when a confirmation round will follow, unchanged when the pass is final."""
        if self.confirm_top < 2 or candidates < 2:
            return policy
        return _capped(policy, self.screen_reps)

    def confirm_round(self, policy: TimingPolicy, candidates: int) -> TimingPolicy:
        """`policy` for a confirmation round of `candidates`: one budget shared by the
        round, as one candidate's timing would spend it, and at most confirm_reps samples."""
        return _capped(replace(policy, budget_s=policy.budget_s / candidates),
                       self.confirm_reps)


def _capped(policy: TimingPolicy, reps: int) -> TimingPolicy:
    """`policy` with at most `reps` samples, never fewer than its min_reps."""
    return replace(policy, max_reps=max(policy.min_reps, min(policy.max_reps, reps)))


def _timed(rows: list[MeasurementRow]) -> list[int]:
    return [i for i, r in enumerate(rows)
            if r.status == R.OK and r.time_ms is not None and r.min_ms is not None]


def contenders(rows: list[MeasurementRow], race: RacePolicy) -> list[int]:
    """Indices of the rows to confirm: the leader (fastest median), then the fastest few
    others within the race factor of it.

    The others are ordered by fastest run, not median: interference only adds time, so a
    noisy candidate's fastest run still says what it can do. The leader always enters: left
    out (three rivals each with one lucky sample), its first-pass median was ranked against
    the round's times, taken in another pass (a review of the tuner, 2026-11-30).
    """
    ok = _timed(rows)
    if len(ok) < 2 or race.confirm_top < 2:
        return []
    first = min(ok, key=lambda i: rows[i].time_ms or 0.0)
    limit = (rows[first].time_ms or 0.0) * race.factor
    near = sorted((i for i in ok if i != first and (rows[i].min_ms or 0.0) <= limit),
                  key=lambda i: rows[i].min_ms or 0.0)
    return [first, *near[: race.confirm_top - 1]] if near else []


def challengers(rows: list[MeasurementRow], confirmed: set[int],
                race: RacePolicy) -> list[int]:
    """After a confirmation round: the best confirmed row and the unconfirmed rows whose
    first-pass time beats it, to be re-timed together; empty when none does.

    A round that ran slower than the first pass (a clock, other work) left an unconfirmed
    row's older time ahead of every confirmed one: only times of one pass decide."""
    timed = _timed(rows)
    ranked = sorted((i for i in timed if i in confirmed), key=lambda i: rows[i].time_ms or 0.0)
    if not ranked:
        return []
    best = ranked[0]
    ahead = sorted((i for i in timed if i not in confirmed
                    and (rows[i].time_ms or 0.0) < (rows[best].time_ms or 0.0)),
                   key=lambda i: rows[i].time_ms or 0.0)
    return [best, *ahead[: max(race.confirm_top - 1, 1)]] if ahead else []
