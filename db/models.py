"""SQLAlchemy 2.0 models. Table and column names are stored forever: add, never rename."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

#: Problem columns, in KEY_FIELDS order (algorithms.problem); one INT column per parameter,
#: as MIOpen's perf-db does, so results can be filtered by any field in SQL.
PROBLEM_INT_FIELDS = (
    "n", "c", "h", "w", "k", "r", "s",
    "pad_h", "pad_w", "stride_h", "stride_w", "dilation_h", "dilation_w", "groups",
)


class Base(DeclarativeBase):
    """Declarative base of every convtune table."""


class Meta(Base):
    """Key/value facts about the database itself (schema_version)."""

    __tablename__ = "convtune_meta"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class Device(Base):
    """One device identity: the hardware and software a timing is valid for."""

    __tablename__ = "devices"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64), unique=True)
    kind: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(256))
    arch: Mapped[str] = mapped_column(String(64))
    units: Mapped[int] = mapped_column(Integer)
    memory_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    info: Mapped[str] = mapped_column(Text)  # canonical JSON of every fingerprint field
    first_seen: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Problem(Base):
    """One convolution problem (forward, NCHW, KCRS)."""

    __tablename__ = "problems"
    __table_args__ = (
        UniqueConstraint(*PROBLEM_INT_FIELDS, "dtype", "math", "layout", "direction"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    n: Mapped[int] = mapped_column(Integer)
    c: Mapped[int] = mapped_column(Integer)
    h: Mapped[int] = mapped_column(Integer)
    w: Mapped[int] = mapped_column(Integer)
    k: Mapped[int] = mapped_column(Integer)
    r: Mapped[int] = mapped_column(Integer)
    s: Mapped[int] = mapped_column(Integer)
    pad_h: Mapped[int] = mapped_column(Integer)
    pad_w: Mapped[int] = mapped_column(Integer)
    stride_h: Mapped[int] = mapped_column(Integer)
    stride_w: Mapped[int] = mapped_column(Integer)
    dilation_h: Mapped[int] = mapped_column(Integer)
    dilation_w: Mapped[int] = mapped_column(Integer)
    groups: Mapped[int] = mapped_column(Integer)
    dtype: Mapped[str] = mapped_column(String(16))
    #: The arithmetic the caller accepts ("fp32", "tf32"); schema 4. Older rows are "fp32".
    math: Mapped[str] = mapped_column(String(8), default="fp32", server_default="fp32")
    layout: Mapped[str] = mapped_column(String(16), default="NCHW")
    direction: Mapped[str] = mapped_column(String(16), default="forward")


class Measurement(Base):
    """One candidate (algorithm + config) measured for one problem on one device."""

    __tablename__ = "measurements"
    __table_args__ = (
        UniqueConstraint("device_id", "problem_id", "algorithm", "config", "impl_hash"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.id"), index=True)
    problem_id: Mapped[int] = mapped_column(ForeignKey("problems.id"), index=True)
    algorithm: Mapped[str] = mapped_column(String(64))
    config: Mapped[str] = mapped_column(String(128))
    impl_hash: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(32))
    time_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    spread_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    min_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    reps: Mapped[int] = mapped_column(Integer, default=0)
    workspace_bytes: Mapped[int] = mapped_column(BigInteger)
    max_error: Mapped[float | None] = mapped_column(Float, nullable=True)
    rel_error: Mapped[float | None] = mapped_column(Float, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    measured_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    tuner_version: Mapped[str] = mapped_column(String(32))
    #: When this store wrote the row, by its own clock (schema 5): merges rank a row by
    #: min(measured_at, recorded_at), so a future measured_at from a wrong or forged clock
    #: cannot outrank later imports. measured_at stays as data.
    recorded_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class Claim(Base):
    """A tuner's claim on one (device, problem) while it measures it (schema version 2).

    The unique constraint is the lock: a second tuner's insert fails and it waits for the
    results instead of measuring the same problem again. A crashed tuner's claim expires.
    """

    __tablename__ = "claims"
    __table_args__ = (UniqueConstraint("device_fingerprint", "problem"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    device_fingerprint: Mapped[str] = mapped_column(String(64))
    problem: Mapped[str] = mapped_column(String(512))  # canonical JSON of the problem key
    owner: Mapped[str] = mapped_column(String(256))  # host:pid:uuid of the claiming tuner
    claimed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)


class Job(Base):
    """A background tuning job of `convtune serve` (schema 6), so that every worker process
    answers polls: the process running it writes each change, any process reads it."""

    __tablename__ = "jobs"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    state: Mapped[str] = mapped_column(String(16), index=True)
    result: Mapped[str] = mapped_column(Text)  # canonical JSON of the job's snapshot
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
