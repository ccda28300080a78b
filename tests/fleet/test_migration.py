"""Databases of every older schema version upgrade to the current one and keep every row."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    create_engine,
    insert,
    inspect,
    text,
)

from algorithms.problem import ConvProblem
from db.bundles import merge_records
from db.engine import open_store
from db.migrations import GENERATION_KEY, SCHEMA_VERSION, stored_version
from tests.fleet.helpers import gpu, row, seed, stored

#: What convtune 0.1 created (schema version 1), frozen here: the models move on, this
#: must not, or the test would upgrade a database no release ever wrote.
V1 = MetaData()
_INT_FIELDS = ("n", "c", "h", "w", "k", "r", "s", "pad_h", "pad_w", "stride_h", "stride_w",
               "dilation_h", "dilation_w", "groups")
Table("convtune_meta", V1, Column("key", String(64), primary_key=True), Column("value", Text))
DEVICES = Table(
    "devices", V1, Column("id", Integer, primary_key=True),
    Column("fingerprint", String(64), unique=True), Column("kind", String(16)),
    Column("name", String(256)), Column("arch", String(64)), Column("units", Integer),
    Column("memory_bytes", BigInteger, nullable=True), Column("info", Text),
    Column("first_seen", DateTime(timezone=True)),
)
PROBLEMS = Table(
    "problems", V1, Column("id", Integer, primary_key=True),
    *(Column(f, Integer) for f in _INT_FIELDS), Column("dtype", String(16)),
    Column("layout", String(16)), Column("direction", String(16)),
    UniqueConstraint(*_INT_FIELDS, "dtype", "layout", "direction"),
)
MEASUREMENTS = Table(
    "measurements", V1, Column("id", Integer, primary_key=True),
    Column("device_id", ForeignKey("devices.id"), index=True),
    Column("problem_id", ForeignKey("problems.id"), index=True),
    Column("algorithm", String(64)), Column("config", String(128)),
    Column("impl_hash", String(64)), Column("status", String(32)),
    Column("time_ms", Float, nullable=True), Column("spread_ms", Float, nullable=True),
    Column("min_ms", Float, nullable=True), Column("reps", Integer),
    Column("workspace_bytes", BigInteger), Column("max_error", Float, nullable=True),
    Column("rel_error", Float, nullable=True), Column("error", Text, nullable=True),
    Column("measured_at", DateTime(timezone=True)), Column("tuner_version", String(32)),
    UniqueConstraint("device_id", "problem_id", "algorithm", "config", "impl_hash"),
)

AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
PROBLEM = ConvProblem(n=2, c=4, h=8, w=8, k=4, r=3, s=3, pad=1)


def make_version_1(url: str) -> None:
    """A version-1 database holding one device, one problem and two measurements."""
    engine = create_engine(url)
    identity = gpu()
    with engine.begin() as conn:
        V1.create_all(conn)
        conn.execute(text("INSERT INTO convtune_meta (key, value) VALUES ('schema_version', '1')"))
        # No explicit ids: PostgreSQL's sequences would not advance past them.
        device_id = conn.execute(insert(DEVICES).returning(DEVICES.c.id).values(
            fingerprint=identity.fingerprint, kind="cuda", name="H100", arch="9.0",
            units=132, memory_bytes=None, info="{}", first_seen=AT,
        )).scalar_one()
        key = {f: v for f, v in PROBLEM.key().items() if f not in ("math", "direction")}
        problem_id = conn.execute(insert(PROBLEMS).returning(PROBLEMS.c.id).values(
            layout="NCHW", direction="forward", **key
        )).scalar_one()
        for algorithm, time_ms in (("direct", 1.0), ("fft", 2.0)):
            conn.execute(insert(MEASUREMENTS).values(
                device_id=device_id, problem_id=problem_id, algorithm=algorithm, config="default",
                impl_hash="fake-v1", status="ok", time_ms=time_ms, spread_ms=0.01,
                min_ms=time_ms, reps=5, workspace_bytes=0, max_error=1e-6, rel_error=1e-7,
                error=None, measured_at=AT, tuner_version="0.1.0",
            ))
    engine.dispose()


def test_version_1_upgrades_and_keeps_rows(store_url: str) -> None:
    make_version_1(store_url)
    store = open_store(store_url)  # upgrades
    with store.engine.connect() as conn:
        assert stored_version(conn) == SCHEMA_VERSION
        assert inspect(conn).has_table("claims")
        # Version 3: the write generation the answer caches of other processes poll.
        generation = conn.execute(
            text("SELECT value FROM convtune_meta WHERE key = :k"), {"k": GENERATION_KEY}
        )
        assert generation.scalar() is not None
    rows = stored(store)
    assert [(r["algorithm"], r["time_ms"], r["problem"]) for r in rows] == [
        ("direct", 1.0, PROBLEM.describe()), ("fft", 2.0, PROBLEM.describe()),
    ]
    assert all(r["measured_at"] == AT.isoformat() for r in rows)


def test_version_4_keys_problems_by_math(store_url: str) -> None:
    # Version 4: the old rows are "fp32", and a tf32 twin of a stored problem is a new
    # problem (the old unique key, without math, would refuse it).
    make_version_1(store_url)
    store = open_store(store_url)
    tf32 = replace(PROBLEM, math="tf32")
    seed(store, gpu(), tf32, [row("direct", 0.5)])
    described = sorted({r["problem"] for r in stored(store)})
    assert described == sorted({PROBLEM.describe(), tf32.describe()})
    assert tf32.describe().endswith("tf32") and not PROBLEM.describe().endswith("tf32")


@pytest.mark.parametrize("version", [SCHEMA_VERSION + 1])
def test_newer_schema_is_refused(store_url: str, version: int) -> None:
    make_version_1(store_url)
    engine = create_engine(store_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE convtune_meta SET value = :v WHERE key = 'schema_version'"),
                     {"v": str(version)})
    engine.dispose()
    with pytest.raises(ValueError, match="newer than this convtune"):
        open_store(store_url)


def test_version_5_records_old_rows_at_the_upgrade(store_url: str) -> None:
    # Bug (issue 12 item 2): merge precedence trusted measured_at alone. Version 5 adds
    # recorded_at (this store's clock); old rows get the upgrade time and keep measured_at.
    make_version_1(store_url)
    engine = create_engine(store_url)
    with engine.begin() as conn:
        conn.execute(MEASUREMENTS.update().values(measured_at=datetime(9999, 1, 1)))
    engine.dispose()
    before = datetime.now(timezone.utc)
    store = open_store(store_url)
    with store.engine.connect() as conn:
        assert "recorded_at" in {c["name"] for c in inspect(conn).get_columns("measurements")}
        recorded = conn.execute(text("SELECT recorded_at FROM measurements")).scalars().all()
    assert len(recorded) == 2 and all(r is not None for r in recorded)
    assert {r["measured_at"][:4] for r in stored(store)} == {"9999"}
    # A measurement made after the upgrade outranks the future-dated old rows.
    later_row = row("direct", 3.0, at=before + timedelta(minutes=1))
    with store.session() as session:
        counts = merge_records(
            session=session, devices={gpu().fingerprint: gpu().info},
            problems={0: PROBLEM.key()}, measurements=[(gpu().fingerprint, 0, later_row)],
        )
    assert counts["replaced"] == 1


def test_version_6_adds_the_jobs_table(store_url: str) -> None:
    # Bug (issue 12 item 7): jobs lived in one worker's memory; version 6 stores them.
    make_version_1(store_url)
    store = open_store(store_url)
    with store.engine.connect() as conn:
        assert inspect(conn).has_table("jobs")
    assert len(stored(store)) == 2


# Bug (a review of 2026-11-30): with Python's sqlite3 the CREATE and ALTER statements of a
# migration ran outside the upgrade's transaction (autocommit), so an upgrade killed or
# failing midway (Ctrl-C, a full disk) left, say, measurements.recorded_at added under
# schema version 4: every later open failed with "duplicate column name: recorded_at".
@pytest.mark.parametrize("interrupted", [1, 3, 4, 5])
def test_an_upgrade_that_fails_midway_leaves_the_store_as_it_was(
        store_url: str, monkeypatch: pytest.MonkeyPatch, interrupted: int) -> None:
    from db import migrations

    make_version_1(store_url)
    step = migrations.MIGRATIONS[interrupted]

    def then_fail(conn: object) -> None:
        step(conn)  # type: ignore[arg-type]
        raise RuntimeError("interrupted")

    monkeypatch.setitem(migrations.MIGRATIONS, interrupted, then_fail)
    with pytest.raises(RuntimeError, match="interrupted"):
        open_store(store_url)
    engine = create_engine(store_url)
    with engine.connect() as conn:
        assert stored_version(conn) == 1  # nothing of the upgrade stayed
        assert not inspect(conn).has_table("claims")
    engine.dispose()
    monkeypatch.setitem(migrations.MIGRATIONS, interrupted, step)
    store = open_store(store_url)  # upgrades again, whole this time
    with store.engine.connect() as conn:
        assert stored_version(conn) == SCHEMA_VERSION
    assert [(r["algorithm"], r["time_ms"]) for r in stored(store)] == [("direct", 1.0),
                                                                       ("fft", 2.0)]


# SQLite rebuilds the problems table at version 4 with the same ids: a store whose problem
# ids have gaps (rows deleted by hand, say) keeps every measurement on its own problem.
def test_version_4_keeps_problem_ids_with_gaps(db_url: str) -> None:
    make_version_1(db_url)
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE problems SET id = 7"))
        conn.execute(text("UPDATE measurements SET problem_id = 7"))
    engine.dispose()
    store = open_store(db_url)
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT id FROM problems")).scalars().all() == [7]
    assert [(r["algorithm"], r["problem"]) for r in stored(store)] == [
        ("direct", PROBLEM.describe()), ("fft", PROBLEM.describe()),
    ]


# Mutation gap: a store of each older version (not only 1) upgrades from its own version,
# each step once: it keeps its write generation, its claims and its tf32 problems.
@pytest.mark.parametrize("version", range(2, SCHEMA_VERSION))
def test_every_older_version_upgrades_from_where_it_is(store_url: str, version: int) -> None:
    from db.claims import list_claims
    from db.find import generation, lock_for_write
    from db.migrations import upgrade
    from db.models import Claim
    from db.models import Problem as ProblemModel

    make_version_1(store_url)
    tf32 = replace(PROBLEM, math="tf32")
    engine = create_engine(store_url)
    with engine.begin() as conn:
        upgrade(conn, target=version)
        conn.execute(insert(Claim.__table__).values(  # type: ignore[arg-type]
            device_fingerprint=gpu().fingerprint, problem="{}", owner="host:1:a",
            claimed_at=AT, expires_at=AT + timedelta(days=3650)))
        if version >= 3:
            conn.execute(text("UPDATE convtune_meta SET value = '41' WHERE key = :k"),
                         {"k": GENERATION_KEY})
        if version >= 4:
            problem_id = conn.execute(insert(ProblemModel.__table__).returning(  # type: ignore[arg-type]
                ProblemModel.__table__.c.id).values(layout="NCHW", **tf32.key())).scalar_one()
            conn.execute(insert(MEASUREMENTS).values(
                device_id=1, problem_id=problem_id, algorithm="direct", config="default",
                impl_hash="fake-v1", status="ok", time_ms=0.5, spread_ms=0.01, min_ms=0.5,
                reps=5, workspace_bytes=0, max_error=1e-6, rel_error=1e-7, error=None,
                measured_at=AT, tuner_version="0.1.0"))
    engine.dispose()
    store = open_store(store_url)
    with store.engine.connect() as conn:
        assert stored_version(conn) == SCHEMA_VERSION
    with store.session() as s:
        assert generation(session=s) == (41 if version >= 3 else 0)
        assert [c["owner"] for c in list_claims(session=s)] == ["host:1:a"]
    # The counter row is there to move (generation() reads 0 where it is missing).
    assert store.write(lambda s: lock_for_write(session=s)) == (42 if version >= 3 else 1)
    expected = [("direct", PROBLEM.describe()), ("fft", PROBLEM.describe())]
    if version >= 4:
        expected.append(("direct", tf32.describe()))
    assert sorted((r["algorithm"], r["problem"]) for r in stored(store)) == sorted(expected)
