"""Claims: which tuner is measuring which (device, problem) right now, across processes.

A claim is a row in `claims`; its unique constraint on (device_fingerprint, problem) is the
lock, so it works the same on SQLite (one host) and PostgreSQL (a fleet). A claim carries
an expiry: a tuner renews it while it measures and deletes it when done, and a crashed
tuner's claim may be taken over once it has expired. Plain values in and out.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from db.models import Claim


def db_now(*, session: Session) -> datetime:
    """The time claims are judged by: the server's clock on PostgreSQL, else this host's.

    Tuners on several hosts share a PostgreSQL store, so their own clocks (which may be
    skewed) never decide whether a claim has expired; an SQLite store lives on one host.
    """
    if session.get_bind().dialect.name == "postgresql":
        now = session.execute(select(func.clock_timestamp())).scalar_one()
        return now if now.tzinfo else now.replace(tzinfo=timezone.utc)
    return datetime.now(timezone.utc)


def _aware(value: datetime) -> datetime:
    # SQLite drops the zone; claims only ever store UTC.
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def try_claim(
    *, session: Session, fingerprint: str, problem: str, owner: str, ttl_s: float
) -> bool:
    """Claim (fingerprint, problem) for `owner` for `ttl_s` seconds; False if someone holds it.

    An expired claim is deleted first, in the same transaction, so taking over a crashed
    tuner's claim is atomic: of several tuners racing for it, exactly one insert succeeds.
    """
    now = db_now(session=session)
    session.execute(
        delete(Claim).where(
            Claim.device_fingerprint == fingerprint,
            Claim.problem == problem,
            Claim.expires_at <= now,
        )
    )
    try:
        with session.begin_nested():
            session.execute(
                insert(Claim).values(
                    device_fingerprint=fingerprint, problem=problem, owner=owner,
                    claimed_at=now, expires_at=now + timedelta(seconds=ttl_s),
                )
            )
    except IntegrityError:
        return False
    return True


def renew_claim(
    *, session: Session, fingerprint: str, problem: str, owner: str, ttl_s: float
) -> bool:
    """Push the expiry of `owner`'s claim `ttl_s` seconds ahead; False if it is not ours now."""
    now = db_now(session=session)
    result = session.execute(
        update(Claim)
        .where(
            Claim.device_fingerprint == fingerprint,
            Claim.problem == problem,
            Claim.owner == owner,
        )
        .values(expires_at=now + timedelta(seconds=ttl_s))
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def release_claim(*, session: Session, fingerprint: str, problem: str, owner: str) -> None:
    """Delete `owner`'s claim (a no-op when it expired and someone else took it over)."""
    session.execute(
        delete(Claim).where(
            Claim.device_fingerprint == fingerprint,
            Claim.problem == problem,
            Claim.owner == owner,
        )
    )


def claim_holder(*, session: Session, fingerprint: str, problem: str) -> dict[str, Any] | None:
    """The current claim on (fingerprint, problem): owner, claimed_at, expires_at; or None."""
    claim = session.execute(
        select(Claim).where(Claim.device_fingerprint == fingerprint, Claim.problem == problem)
    ).scalar()
    if claim is None:
        return None
    return {
        "owner": claim.owner,
        "claimed_at": _aware(claim.claimed_at),
        "expires_at": _aware(claim.expires_at),
    }


def list_claims(*, session: Session) -> list[dict[str, Any]]:
    """Every claim in the store (live or expired), oldest first."""
    rows = session.execute(select(Claim).order_by(Claim.claimed_at, Claim.id)).scalars()
    return [
        {
            "device_fingerprint": c.device_fingerprint,
            "problem": c.problem,
            "owner": c.owner,
            "claimed_at": _aware(c.claimed_at),
            "expires_at": _aware(c.expires_at),
        }
        for c in rows
    ]
