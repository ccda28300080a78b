"""Variants of the cost model's target and inputs, scored leave-one-network-out like
bench_model.py, over several bootstrap seeds: what was tried before settling tuner/model.py.

Usage: python benchmarks/model_variants.py --results bench_fp32.json [...] \
           [--variants shipped,relative,...] [--seeds 0 1 2]

"shipped" is tuner.model.fit itself. The others change one thing of a fit with the same bag
of boosted trees, bootstrap of problems and features (VariantModel):
- absolute: log(ms per FLOP) as the target, one regressor per member (the shipped model
  before 2026-11-26, which also predicted times from it);
- relative, relative_cap3: log(time / the problem's fastest measured time), optionally
  capped at log(3) (the ranking is all a find needs; slow candidates stop mattering).
  "relative" ranks exactly as the shipped model, which adds a fastest-time regressor only
  to predict times;
- traffic: "absolute" with an input more, log(bytes moved / FLOPs), the bytes being the
  operands once plus the workspace written and read once;
- workspace: "absolute" with an input more, log(1 + workspace bytes) - log(FLOPs);
- balance16, balance64, balance256: log(time / (FLOPs + B x bytes moved)) as the target
  (a roofline-like baseline instead of FLOPs alone, so that trees learn the residual);
- relative_cap4: "relative" capped at log(4);
- relative_weighted: "relative" with the rows within 1.5x of their problem's fastest
  weighted 5 times (the top of a ranking is what a find reads);
- near: a classifier of "within 10% of the fastest" (NEAR), ranking by its probability;
- relative_near: "relative" less log(1.5) x that probability (both in each member).
- family_prior: "relative" with two inputs read off the training rows (FamilyPrior): over
  the training problems of the candidate's category (filter, stride, math, dtype,
  direction, depthwise), its family's mean log(time / fastest) and how often the family
  was within 10% of the fastest; for a training row, its own problem left out.
- lambdarank, xendcg: learning to rank instead of regressing (LightGBM's LGBMRanker, each
  problem a query, the same bootstrap of problems and inputs): relevance 8 at the
  problem's fastest down to 0 at twice its time (8 - 8 log2(time / fastest)), and the
  members' mean score ranks. Needs `pip install lightgbm` (not a dependency: it did not
  rank better, BENCHMARKS.md).
Networks named by --train-only (default: the synthetic sweep) are trained on, never held out.
Prints one line per variant: top-1 within 10% and top-3 hit per seed and their means.
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.ensemble import HistGradientBoostingClassifier

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_model import (  # noqa: E402
    by_model,
    from_results,
    held_out_layers,
    held_out_splits,
    score,
    training_rows,
)
from tuner import model as M  # noqa: E402
from tuner.features import NO_NUMBER, Encoder, Sample  # noqa: E402


def traffic(s: Sample) -> float:
    """Bytes a run moves at least: every operand once, its workspace written and read."""
    p = s.problem
    return sum(math.prod(shape) for shape in p.operand_shapes) * p.itemsize \
        + 2 * s.workspace_bytes


@dataclass(frozen=True)
class Variant:
    """How a variant's target, baseline and extra inputs differ from the shipped model."""

    #: log of what the trees' output is added to (the shipped model: FLOPs)
    baseline: Callable[[Sample], float] = lambda s: math.log(s.problem.flops)
    #: training target per sample, None: log(time) - baseline
    target: Callable[[Sequence[Sample]], np.ndarray] | None = None
    #: extra input columns per sample
    extra: tuple[Callable[[Sample], float], ...] = ()
    #: training weight per row, from the target
    weight: Callable[[np.ndarray], np.ndarray] | None = None
    #: with a classifier of "within NEAR of the fastest": its probability's weight in the
    #: log-time (0: the classifier alone ranks), None: no classifier
    near: float | None = None
    #: inputs from the training rows: the candidate's family's mean log(time / fastest)
    #: and its share of wins over the training problems of the same category (FamilyPrior)
    prior: bool = False
    #: a LightGBM ranking objective instead of the regressors (`fit_ranker`), or None
    ranking: str | None = None


def relative(cap: float | None) -> Callable[[Sequence[Sample]], np.ndarray]:
    """log(time / the fastest time measured for the same problem and unit count), capped
    at log(cap)."""
    def target(samples: Sequence[Sample]) -> np.ndarray:
        fastest: dict[object, float] = defaultdict(lambda: math.inf)
        for s in samples:
            key = (s.problem, s.units)
            fastest[key] = min(fastest[key], s.time_ms or math.inf)
        y = np.array([math.log((s.time_ms or math.inf) / fastest[(s.problem, s.units)])
                      for s in samples])
        return y if cap is None else np.minimum(y, math.log(cap))
    return target


def balance(b: float) -> Callable[[Sample], float]:
    """log(FLOPs + b x bytes moved)."""
    return lambda s: math.log(s.problem.flops + b * traffic(s))


VARIANTS: dict[str, Variant] = {
    "shipped": Variant(),  # placeholder: `fit` returns tuner.model.fit's model for it
    "absolute": Variant(),  # log(time) - log(FLOPs): tuner.features.log_ms_per_flop
    "relative": Variant(baseline=lambda s: 0.0, target=relative(None)),
    "relative_cap3": Variant(baseline=lambda s: 0.0, target=relative(3.0)),
    "relative_cap4": Variant(baseline=lambda s: 0.0, target=relative(4.0)),
    "relative_weighted": Variant(baseline=lambda s: 0.0, target=relative(None),
                                 weight=lambda y: 1.0 + 4.0 * (y < math.log(1.5))),
    "near": Variant(baseline=lambda s: 0.0, target=relative(None), near=0.0),
    "relative_near": Variant(baseline=lambda s: 0.0, target=relative(None),
                             near=math.log(1.5)),
    "family_prior": Variant(baseline=lambda s: 0.0, target=relative(None), prior=True),
    "lambdarank": Variant(ranking="lambdarank"),
    "xendcg": Variant(ranking="rank_xendcg"),
    "traffic": Variant(extra=(lambda s: math.log(traffic(s) / s.problem.flops),)),
    "workspace": Variant(extra=(lambda s: math.log1p(s.workspace_bytes)
                                - math.log(s.problem.flops),)),
    **{f"balance{b}": Variant(baseline=balance(b)) for b in (16, 64, 256)},
}


def _classifier(rows: int, seed: int) -> HistGradientBoostingClassifier:
    """Trees shaped as tuner.model's regressors for as many rows, classifying."""
    shape = M._regressor(rows, seed).get_params()
    del shape["loss"], shape["quantile"]  # a regression's; the classifier has its own
    return HistGradientBoostingClassifier(**shape)


@dataclass(frozen=True)
class NearMember:
    """A member of a "near" variant: a ranking regressor (None: the classifier alone) and a
    classifier of "within NEAR of the fastest", whose probability lowers the log-time."""

    regressor: Any
    classifier: Any
    weight: float

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The regressor's log-time less `weight` x the probability (or minus it alone)."""
        classes = list(self.classifier.classes_)
        p = (self.classifier.predict_proba(x)[:, classes.index(1)] if 1 in classes
             else np.zeros(len(x)))
        if self.regressor is None:
            return -p
        return self.regressor.predict(x) - self.weight * p


def category(p: Any) -> tuple[Any, ...]:
    """What FamilyPrior pools problems by."""
    return (p.r, p.s, p.stride, p.math, p.dtype, p.direction,
            p.groups > 1 and p.groups == p.c)


class FamilyPrior:
    """Per (category, algorithm): each training problem's best log(time / fastest) of that
    algorithm; inputs are their mean and the share within NEAR, without the problem asked
    about (so that a training row does not read its own answer)."""

    def __init__(self, samples: Sequence[Sample]) -> None:
        fastest: dict[Any, float] = defaultdict(lambda: math.inf)
        for s in samples:
            fastest[s.problem] = min(fastest[s.problem], s.time_ms or math.inf)
        self.best: dict[tuple[Any, str], dict[Any, float]] = defaultdict(dict)
        for s in samples:
            rel = math.log((s.time_ms or math.inf) / fastest[s.problem])
            found = self.best[(category(s.problem), s.algorithm)]
            found[s.problem] = min(found.get(s.problem, math.inf), rel)

    def inputs(self, s: Sample, own: bool) -> tuple[float, float]:
        """(mean, share within NEAR) for `s`; NO_NUMBER twice where nothing is known."""
        rels = [r for p, r in self.best.get((category(s.problem), s.algorithm), {}).items()
                if not (own and p == s.problem)]
        if not rels:
            return (NO_NUMBER, NO_NUMBER)
        return (float(np.mean(rels)), float(np.mean([r <= math.log(M.NEAR) for r in rels])))


@dataclass(frozen=True)
class VariantModel(M.CostModel):
    """tuner.model's bag of regressors, fitted and read the variant's way."""

    variant: Variant = Variant()
    prior: FamilyPrior | None = None

    def matrix(self, samples: Sequence[Sample], training: bool = False) -> np.ndarray:
        """The encoder's matrix plus the variant's extra columns (and the prior's inputs;
        `training`: each row's own problem left out of them)."""
        x = self.encoder.matrix(samples)
        extra = [[f(s) for f in self.variant.extra] for s in samples]
        if self.variant.extra:
            x = np.hstack([x, np.array(extra)])
        if self.prior is not None:
            x = np.hstack([x, np.array([self.prior.inputs(s, training) for s in samples])])
        return x

    def predict(self, samples: Sequence[Sample]) -> list[M.Prediction]:
        """Predicted times (the members' geometric mean; no spread or confidence)."""
        base = np.array([self.variant.baseline(s) for s in samples])
        x = self.matrix(samples)
        with M.one_thread():
            logs = np.stack([m.predict(x) for m in self.members]) + base
        return [M.Prediction(s.algorithm, s.config, float(math.exp(t)), 0.0, 0.0)
                for s, t in zip(samples, logs.mean(axis=0), strict=True)]


@dataclass(frozen=True)
class RankModel(M.CostModel):
    """A bag of LightGBM rankers; `predict` gives exp(-mean score) as each candidate's "time",
    which orders the candidates as the scores do (no times, spread or confidence)."""

    def predict(self, samples: Sequence[Sample]) -> list[M.Prediction]:
        """The candidates' pseudo-times, lower for a higher mean score."""
        x = self.encoder.matrix(samples)
        scores = np.mean([m.predict(x) for m in self.members], axis=0)
        return [M.Prediction(s.algorithm, s.config, float(math.exp(-v)), 0.0, 0.0)
                for s, v in zip(samples, scores, strict=True)]


def fit_ranker(samples: Sequence[Sample], objective: str, seed: int) -> RankModel:
    """MEMBERS LGBMRankers, each on a bootstrap of problems (a drawn problem is a query of
    its own, repeated as often as drawn), relevance from log(time / fastest)."""
    try:  # by name: not a dependency, so neither mypy nor the test extra knows it
        lightgbm: Any = importlib.import_module("lightgbm")
    except ImportError:
        sys.exit(f"model_variants: the {objective} variant needs lightgbm "
                 "(pip install lightgbm)")
    problems = sorted({s.problem for s in samples}, key=repr)
    index = {p: i for i, p in enumerate(problems)}
    encoder = Encoder.for_samples(samples)
    x = encoder.matrix(samples)
    label = np.clip(np.floor(8 - 8 * relative(None)(samples) / math.log(2)), 0, 8).astype(int)
    of_row = np.array([index[s.problem] for s in samples])
    rows_of = [np.nonzero(of_row == p)[0] for p in range(len(problems))]
    rng = np.random.default_rng(seed)
    members = []
    for m in range(M.MEMBERS):
        draws = np.bincount(rng.integers(0, len(problems), len(problems)),
                            minlength=len(problems))
        queries = [rows_of[p] for p in range(len(problems)) for _ in range(draws[p])]
        rows = np.concatenate(queries)
        ranker = lightgbm.LGBMRanker(
            objective=objective, n_estimators=200, num_leaves=31, learning_rate=0.05,
            min_child_samples=5, random_state=seed + m, verbose=-1, n_jobs=1,
            **({"label_gain": list(range(9))} if objective == "lambdarank" else {}))
        members.append(ranker.fit(x[rows], label[rows], group=[len(q) for q in queries]))
    return RankModel(encoder, tuple(members), len(samples), len(problems))


def fit(samples: Sequence[Sample], variant: Variant, seed: int) -> M.CostModel:
    """The shipped fit (tuner.model's bootstrap of problems and regressors) on the variant's
    data; for "shipped", tuner.model.fit's own model; for the ranking variants, LightGBM's
    rankers (`fit_ranker`)."""
    if variant is VARIANTS["shipped"]:
        model = M.fit(samples, seed=seed)
        assert model is not None, "too few samples to fit"
        return model
    if variant.ranking is not None:
        return fit_ranker(samples, variant.ranking, seed)
    problems = sorted({s.problem for s in samples}, key=repr)
    index = {p: i for i, p in enumerate(problems)}
    shell = VariantModel(Encoder.for_samples(samples), (), len(samples), len(problems),
                         variant=variant,
                         prior=FamilyPrior(samples) if variant.prior else None)
    x = shell.matrix(samples, training=True)
    y = (variant.target(samples) if variant.target is not None else
         np.array([math.log(s.time_ms or math.inf) - variant.baseline(s) for s in samples]))
    of_row = np.array([index[s.problem] for s in samples])
    rng = np.random.default_rng(seed)
    weight = variant.weight(y) if variant.weight is not None else None
    near = (y <= math.log(M.NEAR)).astype(int)
    members: list[Any] = []
    with M.one_thread():
        for m in range(M.MEMBERS):
            rows = M._bootstrap(of_row, len(problems), rng)
            regressor = None if variant.near == 0.0 else M._regressor(len(rows), seed + m).fit(
                x[rows], y[rows], sample_weight=None if weight is None else weight[rows])
            if variant.near is None:
                members.append(regressor)
                continue
            classifier = _classifier(len(rows), seed + m).fit(x[rows], near[rows])
            members.append(NearMember(regressor, classifier, variant.near))
    return VariantModel(shell.encoder, tuple(members), len(samples), len(problems),
                        variant=variant, prior=shell.prior)


def main() -> None:
    """Score each variant over the seeds; print a line each."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--results", type=Path, nargs="+", required=True,
                        help="bench_gpu.py JSON files")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--train-only", default="sweep",
                        help="comma list of networks trained on and never held out")
    args = parser.parse_args()
    samples, problems, _ = from_results(args.results)
    for name in args.variants.split(","):
        if name not in VARIANTS:
            parser.error(f"unknown variant {name!r}; known: {', '.join(VARIANTS)}")
        top1, top3 = [], []
        for seed in args.seeds:
            hits1 = hits3 = layers = 0
            for _, held in held_out_splits(problems, args.train_only.split(",")):
                model = fit(training_rows(samples, held), VARIANTS[name], seed)
                truth = held_out_layers(samples, held)
                found = score([by_model(model, t) for t in truth], truth)
                hits1, hits3, layers = hits1 + found.top1, hits3 + found.top3, \
                    layers + found.layers
            top1.append(hits1 / layers)
            top3.append(hits3 / layers)
        print(f"{name:14s} top-1 within 10% {' / '.join(f'{t:.0%}' for t in top1)} "
              f"(mean {np.mean(top1):.1%}); top-3 hit {' / '.join(f'{t:.0%}' for t in top3)} "
              f"(mean {np.mean(top3):.1%})", flush=True)


if __name__ == "__main__":
    main()
