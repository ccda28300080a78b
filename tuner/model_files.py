"""Fitted cost models kept on disk, so that a new process need not fit again (1-3 s a fit).

One file per (store URL, device kind, model code) under the user's cache directory
(`CONVTUNE_MODEL_DIR` overrides it; empty turns saving off). A process that would fit loads
the file instead when the store still holds what the model was fitted on, grown by less than
REFIT_GROWTH: the rule that already spares refits within a process (tuner.model). "Still
holds" means the digest of its first n samples (oldest first) is the file's, so a store
rebuilt, re-measured or edited under the same URL is fitted anew. "Model code" is a digest
of the source of the model, its features and the algorithms (whose `work` the features read),
and of the library versions: any change of them refits.

The files are pickles, and loading one runs code it names: they live in a directory of this
user's, written atomically. A file that fails to load is ignored, and the next fit replaces it.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from algorithms.registry import hash_sources
from tuner.features import Sample

if TYPE_CHECKING:
    from tuner.model import CostModel

ENV_DIR = "CONVTUNE_MODEL_DIR"
_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class SavedModel:
    """A model as saved: fitted on `rows` samples whose digest is `digest`."""

    rows: int
    digest: str
    model: CostModel


def model_dir() -> Path | None:
    """Where fitted models are kept: $CONVTUNE_MODEL_DIR, else the user's cache; None: off."""
    configured = os.environ.get(ENV_DIR)
    if configured is not None:
        return Path(configured) if configured else None
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("convtune")) / "models"


def samples_digest(samples: Sequence[Sample]) -> str:
    """A digest of the samples, in order (reprs of frozen dataclasses: every field)."""
    digest = hashlib.sha256()
    for sample in samples:
        digest.update(repr(sample).encode())
        digest.update(b"\0")
    return digest.hexdigest()


@functools.cache
def code_version() -> str:
    """What a fitted model depends on besides its samples: sources and library versions."""
    import sklearn  # here, not at import: see tuner.model's _sklearn

    sources = hash_sources([_ROOT / "tuner" / "model.py", _ROOT / "tuner" / "features.py",
                            *(_ROOT / "algorithms").rglob("*.py")])
    return (f"{sys.version_info[:2]} numpy {np.__version__} sklearn {sklearn.__version__} "
            f"{sources}")


def path_for(directory: Path, url: str, kind: str) -> Path:
    """The file of the model of `kind` fitted on the store at `url`."""
    key = hashlib.sha256(f"{url}\0{kind}\0{code_version()}".encode()).hexdigest()[:32]
    return directory / f"model-{key}.pkl"


def load(directory: Path, url: str, kind: str) -> SavedModel | None:
    """The saved model, or None when there is none or it cannot be read."""
    try:
        with path_for(directory, url, kind).open("rb") as f:
            saved = pickle.load(f)  # our own file: see the module docstring
    except Exception:  # missing, truncated, or from code it no longer unpickles against
        return None
    return saved if isinstance(saved, SavedModel) else None


def fitted_on(saved: SavedModel, samples: Sequence[Sample]) -> bool:
    """Whether `saved` was fitted on the first samples of `samples` (as many as it had)."""
    return (saved.rows <= len(samples)
            and samples_digest(samples[:saved.rows]) == saved.digest)


def save(directory: Path, url: str, kind: str, samples: Sequence[Sample],
         model: CostModel) -> None:
    """Keep `model` (fitted on `samples`) for later processes; failures are ignored."""
    path = path_for(directory, url, kind)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=path.name, delete=False) as f:
            pickle.dump(SavedModel(len(samples), samples_digest(samples), model), f)
        os.replace(f.name, path)  # atomic: a reader sees the old file or the new one
    except OSError:
        return  # a read-only or full cache: the next process fits, as before
