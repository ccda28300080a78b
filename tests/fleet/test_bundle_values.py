"""Values a bundle's measurement records may hold: numbers a float cannot take, times and
errors no measurement can have, and the names (configs, implementation hashes, tuner
versions) that a store keeps forever. Every refusal is one BundleError line naming the
record and the field, from the library, the CLI (exit 1) and the API (400), and nothing
is stored; every value a real export holds still imports."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from algorithms.problem import DIRECTIONS, ConvProblem
from algorithms.registry import algorithms_for, backend
from db.engine import Store, open_store
from tests.fleet.helpers import gpu, row, seed, stored
from tests.fleet.test_bundle_validation import edited, measurements
from tests.precision import make_problem
from tests.random_problems import random_problem, wider_problem
from tests.tuner.fakes import small_problem
from tuner.bundles import BundleError, export_bundle, import_bundle, read_bundle
from tuner.cli import main
from tuner.service import Service
from tuner.version import TUNER_VERSION

H100 = gpu()
Change = Callable[[list[dict[str, Any]]], None]


def source_bundle(url: str) -> str:
    """A bundle of one ok row and one failed row, exported from a scratch store."""
    store = open_store(url)
    seed(store, H100, small_problem(), [
        row("direct", 1.5),
        row("fft", None, status="failed", error="boom", max_error=None, rel_error=None),
    ])
    return export_bundle(store)


def on_row(status: str, **values: Any) -> Change:
    """Set `values` on the first measurement, made a row of `status` (its config changed,
    as the review's reproducer did, so it is a new identity)."""
    def change(records: list[dict[str, Any]]) -> None:
        first = measurements(records)[0]
        first.update(status=status, **values)
        if status != "ok":
            first.update(config=values.get("config", "c1"), time_ms=values.get("time_ms"))
    return change


def huge_int(rng: np.random.Generator) -> int:
    """A fresh integer beyond a float's range (1.8e308) that JSON still reads (< 4300 digits)."""
    return int(rng.integers(1, 10)) * 10 ** int(rng.integers(309, 4000)) + int(rng.integers(0, 99))


def draw(rng: np.random.Generator, wider: bool = False) -> ConvProblem | None:
    """A fresh random small problem in a random direction, or None when the draw is invalid."""
    maker = wider_problem if wider else random_problem
    try:
        return make_problem(**maker(rng, str(rng.choice(DIRECTIONS))))
    except ValueError:
        return None


def refused(target: Store, text: str, *named: str) -> str:
    """Import `text` into `target`: one BundleError line naming `named`, nothing stored."""
    before = stored(target)
    with pytest.raises(BundleError) as info:
        import_bundle(target, text)
    message = str(info.value)
    assert "\n" not in message and len(message) < 300, message
    assert message.startswith("bundle line "), message
    for word in named:
        assert word in message, message
    assert stored(target) == before
    return message


# --- numbers ------------------------------------------------------------------------------
@pytest.mark.parametrize("field", ["time_ms", "spread_ms", "min_ms", "max_error", "rel_error"])
def test_an_integer_too_large_for_a_float_is_refused_on_an_ok_row(
    field: str, store_url: str, other_url: str, rng: np.random.Generator
) -> None:
    # Review finding 1: an ok row whose time or error was an integer too large for a float
    # (10**400) made math.isfinite raise OverflowError: a 49-line traceback from
    # `convtune import`, a 500 from POST /v1/bundles.
    text = edited(source_bundle(other_url), on_row("ok", **{field: huge_int(rng)}))
    refused(open_store(store_url), text, field, "out of range")


@pytest.mark.parametrize("status", ["failed", "wrong_result"])
@pytest.mark.parametrize("field", ["max_error", "rel_error", "time_ms", "spread_ms", "min_ms"])
def test_an_integer_too_large_for_a_float_is_refused_on_other_rows(
    field: str, status: str, store_url: str, other_url: str, rng: np.random.Generator
) -> None:
    # Review finding 2: only the times of a row that is not ok were checked, so a huge
    # integer max_error or rel_error got past validation and failed at INSERT
    # (OverflowError; the API answered 503 "database error", blaming the server's store).
    text = edited(source_bundle(other_url), on_row(status, **{field: huge_int(rng)}))
    refused(open_store(store_url), text, field, "out of range")


def test_a_number_with_too_many_digits_for_python_is_refused(
    store_url: str, other_url: str, rng: np.random.Generator
) -> None:
    # Review finding 1, beyond 4300 digits: json.loads raises a plain ValueError (not a
    # JSONDecodeError) that named no line and advised sys.set_int_max_str_digits(); the API
    # answered it with 422 rather than the 400 of a bad bundle.
    digits = "9" * int(rng.integers(4301, 6000))
    lines = edited(source_bundle(other_url), on_row("ok", reps="DIGITS")).splitlines()
    lines = [line.replace('"DIGITS"', digits) for line in lines]
    body = "".join(line + "\n" for line in lines[:-1])
    trailer = json.loads(lines[-1]) | {"sha256": hashlib.sha256(body.encode()).hexdigest()}
    text = body + json.dumps(trailer) + "\n"  # re-signed: only the number is wrong
    refused(open_store(store_url), text, "line 4", "too many digits")


NEGATIVE: dict[str, tuple[str, str]] = {
    "spread_ms of an ok row": ("ok", "spread_ms"),
    "min_ms of an ok row": ("ok", "min_ms"),
    "max_error of an ok row": ("ok", "max_error"),
    "rel_error of an ok row": ("ok", "rel_error"),
    "time_ms of a failed row": ("failed", "time_ms"),
    "spread_ms of a failed row": ("failed", "spread_ms"),
    "max_error of a wrong_result row": ("wrong_result", "max_error"),
    "rel_error of a wrong_result row": ("wrong_result", "rel_error"),
}


@pytest.mark.parametrize("case", list(NEGATIVE))
def test_negative_times_and_errors_are_refused(
    case: str, store_url: str, other_url: str, rng: np.random.Generator
) -> None:
    # Review finding 14: a negative spread_ms, min_ms or error (values no measurement can
    # have: an interquartile range, a fastest run, an absolute error and a norm ratio) was
    # accepted and stored.
    status, field = NEGATIVE[case]
    value = -float(rng.uniform(1e-9, 1e3))
    text = edited(source_bundle(other_url), on_row(status, **{field: value}))
    refused(open_store(store_url), text, field, "negative")


def test_negative_infinite_errors_are_refused_on_any_row(
    store_url: str, other_url: str
) -> None:
    # Review finding 14: errors may be inf or NaN on a row that is not ok, never below zero.
    text = edited(source_bundle(other_url), on_row("wrong_result", max_error=-math.inf))
    refused(open_store(store_url), text, "max_error", "negative")


def test_infinite_and_nan_errors_still_import_on_rows_that_are_not_ok(
    store_url: str, other_url: str
) -> None:
    # An infinite or NaN error is what makes a row wrong_result: such rows stay importable.
    target = open_store(store_url)
    for i, (max_error, rel_error) in enumerate([(math.inf, math.nan), (math.nan, math.inf)]):
        text = edited(source_bundle(other_url), on_row(
            "wrong_result", config=f"c{i}", max_error=max_error, rel_error=rel_error
        ))
        assert import_bundle(target, text)["added"] == 2 - i  # the failed row: once
    statuses = sorted(r["status"] for r in stored(target))
    assert statuses == ["failed", "wrong_result", "wrong_result"]


# --- names --------------------------------------------------------------------------------
BAD_NAMES: dict[str, tuple[str, object]] = {
    "newline in config": ("config", "a\nb"),
    "tab in config": ("config", "a\tb"),
    "space in config": ("config", "bn1024 bk64"),
    "trailing newline in config": ("config", "default\n"),
    "DEL in config": ("config", "a\x7fb"),
    "escape sequence in config": ("config", "\x1b[31mred"),
    "zero-width space in config": ("config", "f2x2\u200b"),
    "non-ASCII look-alike in config": ("config", "f2\u00d72"),
    "quote in config": ("config", 'a"b'),
    "slash in config": ("config", "../default"),
    "empty config": ("config", ""),
    "config too long": ("config", "x" * 129),
    "config a number": ("config", 7),
    "newline in impl_hash": ("impl_hash", "c03d461c\n87a55248"),
    "space in impl_hash": ("impl_hash", "c03d461c 87a55248"),
    "impl_hash too long": ("impl_hash", "f" * 65),
    "newline in tuner_version": ("tuner_version", "0.1.0\n"),
    "space in tuner_version": ("tuner_version", "0.1.0 beta"),
    "control character in tuner_version": ("tuner_version", "0.1\x07.0"),
}


@pytest.mark.parametrize("case", list(BAD_NAMES))
def test_names_that_no_export_holds_are_refused(
    case: str, store_url: str, other_url: str
) -> None:
    # Review finding 14: config names (stored forever) with control characters such as
    # "a\nb" were accepted and stored; only length and NUL were checked.
    field, value = BAD_NAMES[case]
    text = edited(source_bundle(other_url), on_row("ok", **{field: value}))
    message = refused(open_store(store_url), text, field, "invalid")
    assert "\t" not in message and "\x1b" not in message  # shown as a repr, on one line


def shipped_configs(rng: np.random.Generator) -> dict[tuple[str, str], set[str]]:
    """(backend, algorithm) -> the config names it offers on fixed and fresh random problems."""
    problems = [small_problem(), small_problem(c=64, k=128, h=28, w=28, dtype="float16"),
                small_problem(c=32, k=32, groups=32, r=3, s=3)]
    for _ in range(300):
        problem = draw(rng, wider=rng.random() < 0.5)
        if problem is not None:
            problems.append(problem)
    configs: dict[tuple[str, str], set[str]] = {}
    for name in ("cpu", "cuda"):  # the CUDA classes import and enumerate without a GPU
        for algorithm in algorithms_for(name):
            names = configs.setdefault((name, algorithm.name), set())
            for problem in problems:
                if algorithm.supports(problem):
                    names.update(algorithm.configs(problem))
    return configs


def test_every_shipped_config_name_and_hash_still_imports(
    store_url: str, other_url: str, rng: np.random.Generator
) -> None:
    # The name rule of the fix for review finding 14 must keep every name this code writes:
    # each config of each shipped algorithm, each backend's implementation hash and this
    # tuner's version, stored and exported as a tuner would.
    source = open_store(other_url)
    configs = shipped_configs(rng)
    for (name, algorithm), names in sorted(configs.items()):
        digest = backend(name).implementation_hash()
        seed(source, gpu(device=name), small_problem(), [
            row(algorithm, float(rng.uniform(0.01, 10.0)), config=config, impl_hash=digest,
                tuner_version=TUNER_VERSION)
            for config in sorted(names)
        ])
    total = sum(len(names) for names in configs.values())
    assert total > 100  # the CUDA tile configs are among them
    counts = import_bundle(open_store(store_url), export_bundle(source))
    assert counts["added"] == counts["measurements"] == total


def test_a_bundle_of_a_store_tuned_on_the_cpu_still_imports(
    store_url: str, tmp_path: Path, rng: np.random.Generator
) -> None:
    # The rules of the fixes for review findings 1, 2 and 14 must refuse nothing a real
    # export holds: tune fresh random problems on this CPU, export, import elsewhere.
    tuned = open_store(f"sqlite:///{tmp_path / 'tuned.db'}")
    service = Service(tuned)
    problems: list[ConvProblem] = [small_problem()]
    while len(problems) < 4:
        problem = draw(rng)
        if problem is not None:
            problems.append(problem)
    for problem in problems:
        service.find(problem, "cpu", mode="tune")
    text = export_bundle(tuned)
    bundle = read_bundle(text)
    assert bundle.counts()["measurements"] >= len(problems)
    target = open_store(store_url)
    counts = import_bundle(target, text)
    assert counts["added"] == counts["measurements"] == bundle.counts()["measurements"]
    assert stored(target) == stored(tuned)


# --- what the CLI and the API answer ------------------------------------------------------
FRONT_ENDS: dict[str, Change] = {
    "huge time_ms on an ok row": on_row("ok", time_ms=10**400),
    "huge max_error on a failed row": on_row("failed", max_error=10**400),
    "negative spread_ms": on_row("ok", spread_ms=-5),
    "newline in config": on_row("ok", config="a\nb"),
}


@pytest.mark.parametrize("case", list(FRONT_ENDS))
def test_cli_import_of_an_impossible_value_is_one_line(
    case: str, db_url: str, other_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Review findings 1, 2 and 14: `convtune import` printed a 49-line traceback, a bare
    # "(builtins.OverflowError) ..." line naming no record, or stored the value.
    path = tmp_path / "bad.bundle"
    path.write_text(edited(source_bundle(other_url), FRONT_ENDS[case]))
    capsys.readouterr()
    assert main(["import", "--db", db_url, str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("convtune: error: bundle line 4 (") and err.count("\n") == 1, err
    assert stored(open_store(db_url)) == []


def test_api_import_of_an_impossible_value_is_a_400(db_url: str, other_url: str) -> None:
    # Review findings 1, 2 and 14: POST /v1/bundles answered 500 (OverflowError), 503
    # ("database error", for a huge error of a failed row), 422 (too many digits) or 200.
    from api.app import create_app
    from api.settings import Settings
    from tests.api.conftest import TestClient

    good = source_bundle(other_url)
    with TestClient(create_app(Settings(db_url=db_url)), raise_server_exceptions=False) as client:
        for case, change in FRONT_ENDS.items():
            response = client.post("/v1/bundles", content=edited(good, change))
            assert response.status_code == 400, (case, response.text)
            assert json.loads(response.text)["detail"].startswith("bundle line 4 ("), case
        assert stored(open_store(db_url)) == []
        assert client.post("/v1/bundles", content=good).json()["added"] == 2
