"""Predicted answers for configurations this device has not measured for a problem.

First choice: the store's learned cost model (tuner.model) for the device's kind. When the
store is too small to fit one: this device's nearest measured problem of the same kind,
its times scaled by FLOPs (tuner.lookup). Every predicted result has source PREDICTED, no
measurement fields, and a note saying which predictor answered; a model's prediction also
carries a `confidence` (see tuner.model).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

from algorithms.problem import ConvProblem
from db import find as store_find
from db.engine import Store
from tuner import results as R
from tuner.candidates import Candidate
from tuner.devices import DeviceIdentity
from tuner.features import Sample
from tuner.lookup import flops_ratio, nearest_problems, same_kind
from tuner.model import CostModel, model_cache
from tuner.results import AlgorithmResult, rank


def predict(
    store: Store, problem: ConvProblem, identity: DeviceIdentity, allowed: list[Candidate]
) -> list[AlgorithmResult] | None:
    """A predicted result per allowed candidate, or None when nothing to predict from.

    A prediction with no usable time is none: a model that knows none of the candidates'
    algorithms gives way to the nearest measured problem, and a nearest problem on which
    every candidate failed to nothing, so that fast mode measures every candidate and
    heuristic mode says NotInDatabase (both answered with nothing measured and no time,
    and best() found no usable algorithm; a review of the cost model, 2026-11-30).
    """
    if not allowed:
        return None
    model = model_cache(store).model(str(identity.info.get("kind", "")))
    if model is not None:
        found = from_model(model, problem, identity, allowed)
        if any(r.usable for r in found):
            return found
    nearest = scaled_nearest(store, problem, identity, allowed)
    return nearest if nearest is not None and any(r.usable for r in nearest) else None


def from_model(
    model: CostModel, problem: ConvProblem, identity: DeviceIdentity, allowed: list[Candidate]
) -> list[AlgorithmResult]:
    """The model's prediction per candidate; an algorithm it never saw gets no time."""
    units = int(identity.info.get("units") or 0)
    kind = str(identity.info.get("kind", ""))
    known = [c for c in allowed if model.knows(c.algorithm.name)]
    predictions = model.predict([
        Sample(problem, units, c.algorithm.name, c.config, c.workspace_bytes, kind=kind)
        for c in known
    ])
    unknown = len(allowed) - len(known)
    # Its confidence compares it with the candidates the model ranks only: say so.
    apart = (f" it ranks (not with {unknown} of algorithms it never saw)" if unknown else "")
    out = []
    for cand, p in zip(known, predictions, strict=True):
        out.append(_predicted(cand, identity, time_ms=p.time_ms, confidence=p.confidence, note=(
            f"model ({model.describe()}): its members differ by ±{math.expm1(p.spread):.0%}; "
            f"{p.confidence:.0%} of them put it within 10% of the fastest{apart}"
        )))
    for cand in allowed:
        if not model.knows(cand.algorithm.name):
            out.append(_predicted(cand, identity, time_ms=None, confidence=None, note=(
                f"not predicted: the model has no measurement of {cand.algorithm.name}"
            )))
    return out


def scaled_nearest(
    store: Store, problem: ConvProblem, identity: DeviceIdentity, allowed: list[Candidate]
) -> list[AlgorithmResult] | None:
    """Every allowed candidate scaled from this device's nearest measured problem, or None."""
    hashes = {c.algorithm.name: c.impl_hash for c in allowed}
    with store.session() as session:
        measured = store_find.load_similar_measurements(
            session=session, fingerprint=identity.fingerprint, like=same_kind(problem),
            impl_hashes=hashes,
        )
    for other, rows in nearest_problems(problem, measured):
        found = {(r.algorithm, r.config): r for r in rows}
        if any(c.key not in found for c in allowed):
            continue
        scale = flops_ratio(problem, other)
        near = ConvProblem.from_key(dict(other)).describe()
        out = []
        for cand in allowed:
            row = found[cand.key]
            predicted = _predicted(
                cand, identity, time_ms=None if row.time_ms is None else row.time_ms * scale,
                confidence=None, note=f"predicted from {near} (x{scale:.3g} the FLOPs)",
            )
            # The neighbour's failures stand: a config that failed there likely fails here.
            out.append(replace(predicted, status=row.status, error=row.error,
                               measured_at=row.measured_at.isoformat()))
        return out
    return None


#: Fast mode's second round: the configurations of the measured winner's family that the
#: prediction puts within this factor of the family's fastest (see `band_picks`).
FAMILY_BAND = 1.3
#: ... and the same for every family whose first-round best came within this factor of the
#: winner's time (see `contenders`). 1.3, the band's own width: a family measured that
#: close may hold a tile the model ranked below its measured one. The same miss kept
#: fast mode over its 10% target on ResNet-50 (res3.proj on the H200 of 2026-11-27: wgmma
#: 128x128 picked, its first round's tc tile 1.25x slower, tc 64x128 never measured and
#: 12% faster than the pick). Played out on three GPU runs' times (bench_model.py
#: --runner-up), ResNet-50's worst regret in fast mode fell from 8-12% to 0% over every
#: seed, for 1.6-3.0 more measurements a layer (about a quarter more). 1.1 and 1.2 had
#: been tried on earlier runs: misses left at 10-20% (BENCHMARKS.md, "Cost model").
RUNNER_UP = 1.3

Key = tuple[str, str]  # (algorithm, config)


#: Words of a config name that give its operands another layout: NHWC tiles, im2col_gemm's
#: "merged" (every image's columns side by side in one GEMM), and implicit_gemm_wgmma's
#: "nchw" tiles (pointwise layers from x and w as they are; its other tiles read NHWC
#: copies). No GPU has timed the NCHW tiles yet: they count apart for the same reason as
#: the others, a different kernel whose rank among its algorithm's tiles the model may miss.
LAYOUTS = ("nhwc", "merged", "nchw")
#: Algorithms each of whose configurations is a family of its own: winograd's "f2x2" and
#: "f4x4" are two Winograd algorithms, with their own transforms, numerics and arithmetic
#: (at math "tf32" F(2x2)'s GEMM reads TF32 and F(4x4)'s stays FP32); fft's "default"
#: (cuFFT, nine launches) and "fused" (its own transforms, two) share only the GEMMs.
EACH_CONFIG_APART = ("winograd", "fft")


def family(key: Key) -> tuple[str, str]:
    """A configuration's family: its algorithm in one operand layout (LAYOUTS: an NHWC
    or merged configuration is a family apart from the rest of its algorithm's), or the
    configuration itself for the algorithms of EACH_CONFIG_APART.

    Why Winograd's configurations stand apart: on three GPU runs' measurements (H100
    2026-11-27, H200 2026-11-26 twice) the model put F(4x4) first within the family on
    VGG-16's TF32 3x3 layers, where F(2x2) won by 15-77%; fast mode measured F(4x4) as the
    family's best, it lost, and F(2x2) was never measured. Apart, played out on those
    times over three seeds, those misses are gone at the same 8-9 measurements a layer
    (BENCHMARKS.md, "Cost model").

    Why merged counts apart: on the H200's 2026-11-26 measurements (seventeenth session)
    fast mode measured im2col_gemm's unmerged "chunk=all" as that family's best on
    ResNet-50's late 1x1 layers and never its merged one, 1.3-3.7x faster there; played
    out on those times its worst regret fell from 120% to 67% at the same count of
    measurements (BENCHMARKS.md, "Cost model").
    """
    if key[0] in EACH_CONFIG_APART:
        return key
    return key[0], next((word for word in LAYOUTS if word in key[1]), "")


def fast_picks(ranked: Sequence[Key], k: int) -> list[Key]:
    """What a fast find measures first of (algorithm, config) keys ranked fastest first: the
    `k` first, and the first of each of the `k` first families (`family`).

    Why the second part: the model errs by algorithm more than by configuration (on a
    layer unlike its training ones it under-rates an algorithm as a whole), so a fast find
    hedges across algorithms. On the H100 measurements of BENCHMARKS.md the top 4 alone
    left a worst regret of 99% (GoogLeNet's 3x3 layers, whose winner is winograd); with
    the best of the top 4 algorithms added, 10-49% over the model's seeds (one small
    layer's tile), for about 1.8 more measurements a layer. Layouts count apart since the
    2026-11-25 measurements: there the model put implicit_gemm_tc's NHWC tiles first on
    1x1 layers whose winner was an NCHW tile (worst regret 54-77% over the seeds; with
    layout families 38-56%, at the same count of measurements).

    Then the first of every other family of the algorithms chosen so far: an algorithm's
    other operand layouts, Winograd's other tile. On the H200 measurements of the
    seventeenth session the model ranked im2col_gemm's merged family below four others on
    ResNet-50's c2048 7x7 1x1 layers, where it won by 30-67% over the unmerged
    configuration fast mode measured; with the siblings, played out on three GPU runs over
    three seeds, the worst regret is 11-27% (from 13-77%), at 0.2-0.9 more measurements a
    layer (BENCHMARKS.md, "Cost model").
    """
    chosen = list(ranked[:k])
    families: list[tuple[str, str]] = []
    for key in ranked:
        if family(key) not in families:
            families.append(family(key))
            if key not in chosen:
                chosen.append(key)
            if len(families) == k:
                break
    algorithms = {key[0] for key in chosen}
    for key in ranked:
        if key[0] in algorithms and family(key) not in families:
            families.append(family(key))
            chosen.append(key)
    return chosen


def band_picks(predicted_ms: Mapping[Key, float], winner: Key,
               band: float = FAMILY_BAND) -> list[Key]:
    """The second round of a fast find: of the configurations with a predicted time, those
    of `winner`'s family (the fastest the first round measured) predicted within `band` of
    that family's fastest, fastest first.

    Why: once the first round has shown which family wins, what the model still gets wrong
    is the tile within it. On the H100 measurements of 2026-11-25 the misses left after the
    hedge of `fast_picks` were all of that kind (ResNet-50's 1x1 layers: 128x128 picked,
    64x64 best, 1.2-1.4x apart), and the model's times for a family's tiles lie close
    together. Played out on those measurements (BENCHMARKS.md), this round cut the layers
    more than 5% off the best from 12-17 to 4-6 of 166, at about 1.8 more measurements a
    layer (the extra configurations and the winner again, timed together).
    """
    members = sorted((key for key in predicted_ms if family(key) == family(winner)),
                     key=predicted_ms.__getitem__)
    if not members:
        return []
    limit = predicted_ms[members[0]] * band
    return [key for key in members if predicted_ms[key] <= limit]


def contenders(measured_ms: Mapping[Key, float], runner_up: float = RUNNER_UP) -> list[Key]:
    """The fastest measured configuration of each family whose fastest is within
    `runner_up` of the overall fastest, fastest first (the winner first)."""
    best: dict[tuple[str, str], Key] = {}
    for key in sorted(measured_ms, key=measured_ms.__getitem__):
        best.setdefault(family(key), key)
    if not best:
        return []
    fastest = min(measured_ms.values())
    return [key for key in best.values() if measured_ms[key] <= fastest * runner_up]


def round_two(predicted_ms: Mapping[Key, float], measured_ms: Mapping[Key, float],
              band: float = FAMILY_BAND, runner_up: float = RUNNER_UP,
              tried: Collection[Key] = ()) -> list[Key]:
    """The configurations a fast find's second round adds (`band_picks` of each of the
    `contenders`) that its first round left unmeasured, each once; none `tried` already
    (measured, usable or not)."""
    todo: list[Key] = []
    for key in contenders(measured_ms, runner_up):
        todo += [k for k in band_picks(predicted_ms, key, band)
                 if k not in measured_ms and k not in tried and k not in todo]
    return todo


def top_candidates(
    predicted: list[AlgorithmResult], allowed: list[Candidate], k: int
) -> list[Candidate]:
    """The candidates `fast_picks` chooses from the prediction, and every one nothing could
    rank (an algorithm the model never saw: measuring it is the only way to learn of it)."""
    by_key = {c.key: c for c in allowed}
    ranked = [(r.algorithm, r.config) for r in rank(predicted) if r.usable]
    unranked = [(r.algorithm, r.config) for r in predicted
                if r.status == R.OK and r.time_ms is None]
    return [by_key[key] for key in fast_picks(ranked, k) + unranked]


def second_round(
    predicted: list[AlgorithmResult], measured: Mapping[Key, AlgorithmResult],
    allowed: list[Candidate],
) -> list[Candidate]:
    """What a fast find measures after its first round (`round_two`): the configurations
    of the contending families that the round left unmeasured, with the contenders again
    so that they are timed side by side; nothing when there are none."""
    measured_ms = {key: r.time_ms for key, r in measured.items()
                   if r.usable and r.time_ms is not None}
    predicted_ms = {(r.algorithm, r.config): r.time_ms for r in predicted
                    if r.usable and r.time_ms is not None}
    # A stored failure is measured too: counted as untried, it went back into the round,
    # run again with the contenders re-timed beside it, on every later fast find (a review
    # of the cost model, 2026-11-30).
    todo = round_two(predicted_ms, measured_ms, tried=measured.keys())
    if not todo:
        return []
    by_key = {c.key: c for c in allowed}
    return [by_key[key] for key in (*contenders(measured_ms), *todo) if key in by_key]


def not_measured(prediction: AlgorithmResult) -> AlgorithmResult:
    """A candidate a fast find left unmeasured: its predicted time in the note only, so
    that it never outranks a measured one."""
    guess = "no prediction" if prediction.time_ms is None else \
        f"predicted {prediction.time_ms:.3g} ms"
    return replace(
        prediction, status=R.OK, time_ms=None, error=None, source=R.NOT_MEASURED,
        measured_at=None, note=f"fast mode: not measured ({guess})",
    )


def _predicted(
    cand: Candidate, identity: DeviceIdentity, *, time_ms: float | None,
    confidence: float | None, note: str,
) -> AlgorithmResult:
    return AlgorithmResult(
        algorithm=cand.algorithm.name, config=cand.config, status=R.OK, time_ms=time_ms,
        workspace_bytes=cand.workspace_bytes, source=R.PREDICTED, device=identity.fingerprint,
        note=note, confidence=confidence,
    )
