"""Which measurements a prune deletes: the criteria checked, and this code's hashes."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

from algorithms.registry import BACKEND_MODULES, algorithms_for
from db.engine import Store
from db.prune import Pruned, prune_measurements
from tuner.candidates import impl_hash_of


def current_hashes() -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """({backend: {algorithm: implementation hash}} of this code, {backend: why not} for a
    backend that cannot load here: its rows cannot be judged, so no prune calls them stale)."""
    hashes: dict[str, dict[str, str]] = {}
    unknown: dict[str, str] = {}
    for name in BACKEND_MODULES:
        try:
            hashes[name] = {a.name: impl_hash_of(a, name) for a in algorithms_for(name)}
        except Exception as exc:  # as Service.algorithms reports a backend that cannot load
            unknown[name] = f"{type(exc).__name__}: {exc}"
    return hashes, unknown


def prune(store: Store, *, device: str | None = None, older_than_days: float | None = None,
          stale: bool = False, delete: bool = False) -> tuple[Pruned, dict[str, str]]:
    """The measurements matching every criterion given (at least one), deleted if `delete`,
    and {backend: why} for the backends whose rows `stale` left alone (see current_hashes).

    `stale`: rows of older code (an implementation hash this convtune does not compute for
    their algorithm on their device's backend), which no find of this version reads, though
    hosts of other versions sharing the store do, and the cost model learns from them.
    """
    if device is None and older_than_days is None and not stale:
        raise ValueError("give the measurements to prune: stale, older than some days, or a "
                         "device's (nothing is pruned by default)")
    if device is not None and (not isinstance(device, str) or not device or "\x00" in device):
        raise ValueError(f"device must be a fingerprint or a prefix of one, got {device!r}")
    before = None
    if older_than_days is not None:
        if (isinstance(older_than_days, bool) or not isinstance(older_than_days, int | float)
                or not math.isfinite(older_than_days) or older_than_days < 0):
            raise ValueError(f"older_than_days must be a non-negative number of days, got "
                             f"{older_than_days!r}")
        before = datetime.now(timezone.utc) - timedelta(days=older_than_days)
    current, unjudged = current_hashes() if stale else (None, {})
    return store.write(lambda session: prune_measurements(
        session=session, device=device, before=before, current=current, delete_rows=delete),
    ), unjudged
