"""Fitted cost models kept on disk, so that a new process need not fit again (1-3 s a fit).

One file per (store URL, device kind, model code) under the user's cache directory
(`CONVTUNE_MODEL_DIR` overrides it; empty turns saving off). A process that would fit loads
the file instead when the store still holds what the model was fitted on, grown by less than
REFIT_GROWTH: the rule that already spares refits within a process (tuner.model). "Still
holds" means the digest of its first n samples (oldest first) is the file's, so a store
rebuilt, re-measured or edited under the same URL is fitted anew. "Model code" is a digest
of the source of the model, its features and the algorithms (whose `work` the features read),
and of the library versions: any change of them refits, and the save of that fit removes
the store's and kind's files of other model code (one file per store and kind is kept).

The files are pickles, and loading one runs code it names: they live in a directory of this
user's, written atomically, and are read only where that directory and the file are this
user's and nobody else can write them (else the cache is off: `trusted`). A file that fails to
load is ignored, and the next fit replaces it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import pickle
import stat
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from algorithms.registry import hash_sources
from tuner.features import Sample

if TYPE_CHECKING:
    from tuner.model import CostModel

log = logging.getLogger(__name__)

ENV_DIR = "CONVTUNE_MODEL_DIR"
_ROOT = Path(__file__).resolve().parents[1]
#: The model code's digest, read when this process imports it (about 2 ms): read at the
#: first save instead, sources upgraded on disk meanwhile (pip install -U under a running
#: server) put this process's fit under the new code's key, and every new process's find
#: failed on it ("X has 52 features, but ... is expecting 51").
_SOURCES = hash_sources([_ROOT / "tuner" / "model.py", _ROOT / "tuner" / "features.py",
                         Path(__file__), *(_ROOT / "algorithms").rglob("*.py")])


@dataclass(frozen=True)
class SavedModel:
    """A model as saved: fitted on `rows` samples whose digest is `digest`."""

    rows: int
    digest: str
    model: CostModel


def model_dir() -> Path | None:
    """Where fitted models are kept: $CONVTUNE_MODEL_DIR, else the user's cache; None: off
    (also where there is no user cache: no home directory, as for a container's UID)."""
    configured = os.environ.get(ENV_DIR)
    if configured is not None:
        return Path(configured) if configured else None
    from platformdirs import user_cache_dir

    try:
        return Path(user_cache_dir("convtune")) / "models"
    except (RuntimeError, KeyError, OSError):
        return None


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

    return (f"{sys.version_info[:2]} numpy {np.__version__} sklearn {sklearn.__version__} "
            f"{_SOURCES}")


def _short(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def path_for(directory: Path, url: str, kind: str) -> Path:
    """The file of the model of `kind` fitted on the store at `url` by this model code:
    named for (store, kind), then for the code, so that a save can find the files it
    outdates."""
    store = _short("\0".join((url, kind)))
    return directory / f"model-{store}-{_short(code_version())}.pkl"


def _ours(st: os.stat_result) -> bool:
    """Whether a file or directory of `st` is this user's and nobody else may write it
    (always, where there are no such owners and modes to check: Windows)."""
    if not hasattr(os, "geteuid"):
        return True
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


_warned: set[Path] = set()


def trusted(directory: Path) -> bool:
    """Whether `directory` is one whose pickles this process may load and write: this
    user's and writable by nobody else (a review of security, 2026-11-30: a pickle planted
    in a shared CONVTUNE_MODEL_DIR ran its code in a server at an anonymous heuristic find).
    A directory that does not exist yet is, since `save` makes it this user's alone."""
    try:
        ok = _ours(directory.stat())
    except FileNotFoundError:
        return True
    except OSError:
        ok = False
    if not ok and directory not in _warned:
        _warned.add(directory)
        log.warning("convtune: not using the cost models in %s: the directory must be this "
                    "user's and writable by nobody else (fits are not kept)", directory)
    return ok


def load(directory: Path, url: str, kind: str) -> SavedModel | None:
    """The saved model, or None when there is none, it cannot be read, or it or its
    directory is not this user's alone (the caller checks that it predicts: tuner.model)."""
    if not trusted(directory):
        return None
    try:
        with path_for(directory, url, kind).open("rb") as f:
            if not _ours(os.fstat(f.fileno())):
                return None  # checked on the file opened, not on its name: no swap between
            saved = pickle.load(f)  # our own file: see the module docstring
            # Used: not swept as unused (a read-only cache keeps its times; nothing sweeps
            # it either). By name where utime takes no descriptor (Windows).
            with contextlib.suppress(OSError, TypeError, NotImplementedError):
                os.utime(f.fileno() if os.utime in os.supports_fd else f.name)
    except Exception:  # missing, truncated, or from code it no longer unpickles against
        return None
    if not (isinstance(saved, SavedModel) and isinstance(getattr(saved, "rows", None), int)
            and isinstance(getattr(saved, "digest", None), str)):
        return None  # another layout of the file (no field is trusted by name alone)
    return saved


def _sweep(directory: Path) -> None:
    """Remove temporaries a killed process left (`model-*.pkl` and a random suffix; kill -9
    mid-save kept them for good; a review of the state on disk, 2026-11-30), and fits no
    process has saved or loaded for UNUSED_S (those of stores since deleted: a temporary
    store per run left its 0.9 MB here for good; a review of resource lifetimes)."""
    now = time.time()
    for stale in directory.glob("model-*.pkl?*"):
        with contextlib.suppress(OSError):
            if now - stale.stat().st_mtime > STALE_S:
                stale.unlink()
    for fit in directory.glob("model-*.pkl"):
        with contextlib.suppress(OSError):
            if now - fit.stat().st_mtime > UNUSED_S:
                fit.unlink()


#: Age past which a temporary is a crashed writer's (a save takes well under a second).
STALE_S = 3600.0
#: Age past which a fit nobody saved or loaded is dropped (a load renews it).
UNUSED_S = 30 * 86400.0


def fitted_on(saved: SavedModel, samples: Sequence[Sample]) -> bool:
    """Whether `saved` was fitted on the first samples of `samples` (as many as it had)."""
    return (saved.rows <= len(samples)
            and samples_digest(samples[:saved.rows]) == saved.digest)


def save(directory: Path, url: str, kind: str, samples: Sequence[Sample],
         model: CostModel) -> None:
    """Keep `model` (fitted on `samples`) for later processes; failures are ignored."""
    path = path_for(directory, url, kind)
    partial: str | None = None
    if not trusted(directory):
        return  # no process would load it
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        _sweep(directory)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=path.name, delete=False) as f:
            partial = f.name
            pickle.dump(SavedModel(len(samples), samples_digest(samples), model), f)
        os.replace(partial, path)  # atomic: a reader sees the old file or the new one
        partial = None
        # The same store's and kind's fits by other model code: no process of this code
        # reads them, and each upgrade left one more, 0.2-2 MB, for good.
        for old in directory.glob(f"{path.name.rsplit('-', 1)[0]}-*.pkl"):
            if old != path:
                old.unlink(missing_ok=True)
    except Exception:
        # A read-only or full cache, a directory where the file goes: the next process fits,
        # as before. The temporary goes too (each failed save left one, a full disk's
        # 64 KiB partial included).
        if partial is not None:
            with contextlib.suppress(OSError):
                os.unlink(partial)
