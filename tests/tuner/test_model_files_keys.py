"""Fitted cost models on disk: what a saved fit is kept under (store, device kind, model
code) and what a save makes of its directory (the mutation review of 2026-12-01; loading
and trust are in test_model_files.py)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.tuner.test_model import SPEED, synthetic, training_problems
from tuner import model as M
from tuner import model_files


@pytest.fixture
def fitted() -> tuple[list[M.Sample], M.CostModel]:
    """Samples of random speeds and the model fitted on them."""
    rng = np.random.default_rng()
    speeds = {name: speed * float(rng.uniform(0.5, 2.0)) for name, speed in SPEED.items()}
    samples = synthetic(speeds, training_problems())
    model = M.fit(samples, members=1)
    assert model is not None
    return samples, model


@pytest.fixture
def fresh_code_version() -> Iterator[None]:
    """code_version read anew in the test, and again after it (it is cached per process)."""
    model_files.code_version.cache_clear()
    yield
    model_files.code_version.cache_clear()


# Mutation gap: one store's fits of two device kinds were never saved side by side: a file
# named for the store alone (a CPU fit served for CUDA, each save overwriting the other's)
# went unseen, and so did one named for the kind alone (another store's fit served).
def test_each_store_and_device_kind_keeps_a_fit_of_its_own(
        tmp_path: Path, fitted: tuple[list[M.Sample], M.CostModel]) -> None:
    samples, model = fitted
    url, other = "sqlite:///a.db", "sqlite:///b.db"
    model_files.save(tmp_path, url, "cpu", samples, model)
    assert model_files.load(tmp_path, url, "cuda") is None
    assert model_files.load(tmp_path, other, "cpu") is None
    model_files.save(tmp_path, url, "cuda", samples[:-4], model)
    cpu, cuda = (model_files.load(tmp_path, url, kind) for kind in ("cpu", "cuda"))
    assert cpu is not None and cuda is not None
    assert (cpu.rows, cuda.rows) == (len(samples), len(samples) - 4)
    assert cpu.digest == model_files.samples_digest(samples)


# Mutation gap: a fit of other model code was shown refused only with code_version replaced
# whole: the library versions and the sources it names could each drop out of it unseen, and
# a fit made under another scikit-learn (or other model sources) be served.
@pytest.mark.parametrize("change", ["sklearn", "numpy", "sources"])
def test_a_fit_saved_under_other_libraries_or_sources_is_not_loaded(
        tmp_path: Path, fitted: tuple[list[M.Sample], M.CostModel], change: str,
        monkeypatch: pytest.MonkeyPatch, fresh_code_version: None) -> None:
    import sklearn

    samples, model = fitted
    url = "sqlite:///a.db"
    model_files.save(tmp_path, url, "cpu", samples, model)
    assert model_files.load(tmp_path, url, "cpu") is not None
    if change == "sklearn":
        monkeypatch.setattr(sklearn, "__version__", sklearn.__version__ + ".post1")
    elif change == "numpy":
        monkeypatch.setattr(np, "__version__", np.__version__ + ".post1")
    else:
        monkeypatch.setattr(model_files, "_SOURCES", model_files._SOURCES[::-1])
    model_files.code_version.cache_clear()
    assert model_files.load(tmp_path, url, "cpu") is None


# Mutation gap: the sweep of a crashed save's temporaries was checked at twice STALE_S (and a
# brand new one) only: its age shrunk to a minute, a save under way in another process would
# lose its temporary.
def test_a_temporary_younger_than_an_hour_is_kept_and_an_older_one_swept(
        tmp_path: Path) -> None:
    rng = np.random.default_rng()
    young, old = tmp_path / "model-aaaa-bbbb.pklx1", tmp_path / "model-cccc-dddd.pkly2"
    for path, minutes in ((young, rng.uniform(5, 55)), (old, rng.uniform(65, 120))):
        path.write_bytes(b"partial")
        then = time.time() - minutes * 60
        os.utime(path, (then, then))
    model_files._sweep(tmp_path)
    assert young.exists() and not old.exists()
