"""Fabricated devices and measurements for fleet tests."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, cast

from algorithms.base import Algorithm
from algorithms.problem import ConvProblem
from algorithms.runtime import TimingPolicy
from db import find as store_find
from db import reports
from db.engine import Store
from db.rows import MeasurementRow
from tuner.devices import DeviceIdentity, fingerprint_of

QUICK = TimingPolicy(warmup=1, budget_s=0.0, min_reps=2, max_reps=2)
T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)


def gpu(name: str = "NVIDIA H100 80GB HBM3", arch: str = "9.0", units: int = 132,
        driver: str = "550.54.15", device: str = "cpu", **extra: Any) -> DeviceIdentity:
    """A fabricated CUDA device identity; `device` says where it 'runs' in this process."""
    info: dict[str, Any] = {
        "kind": "cuda", "name": name, "arch": arch, "units": units,
        "memory_bytes": 80 * 2**30, "driver": driver, "runtime": "12040", "cupy": "13.3.0",
        **extra,
    }
    return DeviceIdentity(device=device, fingerprint=fingerprint_of(info), info=info)


def row(algorithm: str, time_ms: float | None, *, config: str = "default",
        impl_hash: str = "fake-v1", at: datetime = T0, status: str = "ok",
        **kw: Any) -> MeasurementRow:
    """One measurement row with sensible defaults."""
    values: dict[str, Any] = dict(
        algorithm=algorithm, config=config, impl_hash=impl_hash, status=status,
        time_ms=time_ms, spread_ms=0.01, min_ms=time_ms, reps=5, workspace_bytes=0,
        max_error=1e-6, rel_error=1e-7, error=None, measured_at=at, tuner_version="0.1.0",
    )
    values.update(kw)
    return MeasurementRow(**values)


def seed(store: Store, identity: DeviceIdentity, problem: ConvProblem,
         rows: list[MeasurementRow]) -> None:
    """Store rows as if `identity` had measured them."""
    with store.session() as session:
        store_find.save_measurements(
            session=session, fingerprint=identity.fingerprint, device_info=identity.info,
            key=problem.key(), rows=rows,
        )


def stored(store: Store) -> list[dict[str, Any]]:
    """Every stored measurement as (device, problem, algorithm, config, hash, time, at)."""
    with store.session() as session:
        _total, page = reports.list_results(session=session, limit=100_000)
    return sorted(
        (
            {k: r[k] for k in ("device", "algorithm", "config", "impl_hash", "time_ms",
                               "measured_at", "status")}
            | {"problem": ConvProblem.from_key(r["problem"]).describe()}
            for r in page
        ),
        key=lambda r: sorted(r.items()),
    )


def later(minutes: int) -> datetime:
    """T0 plus some minutes."""
    return T0 + timedelta(minutes=minutes)


def algos(*fakes: object) -> list[Algorithm]:
    """Fakes typed as algorithms (their `name` is an instance attribute, not a ClassVar)."""
    return cast(list[Algorithm], list(fakes))
