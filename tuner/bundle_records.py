"""One record of a bundle checked (tuner.bundles reads the file around them): a device, a
problem or a measurement as plain values, or BundleError with a one-line message naming
the line and the record. What passes may enter a store, where names stay forever."""

from __future__ import annotations

import json
import math
import re
from datetime import datetime, timedelta, timezone
from typing import Any, TypeGuard

from algorithms.problem import KEY_DEFAULTS, KEY_FIELDS, ConvProblem
from algorithms.reference import tolerance
from algorithms.registry import ALGORITHM_NAMES
from db.rows import (
    DEVICE_TEXT_LIMITS,
    ERROR_TEXT_LIMIT,
    INT32_MAX,
    INT64_MAX,
    MeasurementRow,
    utcnow,
)
from tuner.devices import fingerprint_of
from tuner.results import STATUSES, within

_DEVICE_FIELDS = {"kind": str, "name": str, "arch": str, "units": int}
_OPTIONAL_FLOATS = ("time_ms", "spread_ms", "min_ms", "max_error", "rel_error")
#: Times are finite wherever given; errors may be inf/NaN only on rows that are not ok
#: (an infinite error is what makes a row wrong_result).
_TIMES = ("time_ms", "spread_ms", "min_ms")
#: Config names and implementation hashes are stored forever (and keyed on), so only a
#: token a real one can be gets in: ASCII letters, digits and `_ . + = : , -`. The shipped
#: algorithms' configs use [a-z0-9_=-] ("bn1024_bk64", "chunk=all-merged", "128x64x32-s3-f1");
#: implementation hashes are 16 hex digits (algorithms.registry.hash_sources). No control
#: character, whitespace, quote, slash or non-ASCII look-alike can pass.
NAME_RE = re.compile(r"[A-Za-z0-9_.+=:,-]+")
#: Tuner versions are PEP 440 version strings ("0.1.0", "1!2.0rc1.post3+g1a2b3c").
VERSION_RE = re.compile(r"[A-Za-z0-9_.+!-]+")
_TEXT_FIELDS = (("config", 128, NAME_RE), ("impl_hash", 64, NAME_RE),
                ("tuner_version", 32, VERSION_RE))
#: How far past this host's clock a measured_at may lie (clocks of a fleet drift a little).
CLOCK_SKEW = timedelta(minutes=5)



class BundleError(ValueError):
    """The file is not a valid convtune bundle (the message is one line)."""


def json_record(text: str, number: int) -> dict[str, Any]:
    """Line `number` of a bundle as a JSON object."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BundleError(f"bundle line {number} is not valid JSON ({exc.msg})") from None
    except ValueError:
        # Python refuses integers of more than sys.get_int_max_str_digits() digits with a
        # plain ValueError (not a JSONDecodeError) whose text advises a setting: no bundle
        # value is that long.
        raise BundleError(f"bundle line {number} holds a number with too many digits") from None
    except RecursionError:  # a hostile line of deeply nested arrays: not a bundle record
        raise BundleError(f"bundle line {number} is nested too deeply") from None
    if not isinstance(value, dict):
        raise BundleError(f"bundle line {number} is not a JSON object")
    return value


def is_int(value: Any) -> TypeGuard[int]:
    """Whether `value` is an int (a bool is not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def shown(value: Any) -> str:
    """`value` for a one-line message: its repr, cut short (a refused name may be huge)."""
    if is_int(value) and value.bit_length() > 64:
        return f"an integer of {len(str(abs(value)))} digits"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _number(value: Any, name: str, where: str) -> float | None:
    """An optional float field as a float (None stays None); BundleError for anything else,
    including an integer too large for a float (float() would raise OverflowError later)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BundleError(f"{where}: {name} must be a number or null, got {shown(value)}")
    try:
        return float(value)
    except OverflowError:
        raise BundleError(
            f"{where}: {name} ({shown(value)}) is out of range for a float"
        ) from None


def device_record(record: dict[str, Any], number: int) -> tuple[str, dict[str, Any]]:
    fp, info = record.get("fingerprint"), record.get("info")
    if not isinstance(fp, str) or not fp or len(fp) > 64:
        raise BundleError(f"bundle line {number}: device fingerprint {fp!r} is invalid")
    if not isinstance(info, dict):
        raise BundleError(f"bundle line {number}: device {fp} has no info object")
    for name, kind in _DEVICE_FIELDS.items():
        value = info.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise BundleError(f"bundle line {number}: device {fp} info field {name!r} is {value!r}")
    for name, limit in DEVICE_TEXT_LIMITS.items():
        value = info[name]
        if len(value) > limit or "\x00" in value:
            raise BundleError(
                f"bundle line {number}: device {fp} info field {name!r} is longer than {limit} "
                "characters or holds a NUL"
            )
    if not 0 <= info["units"] <= INT32_MAX:
        raise BundleError(
            f"bundle line {number}: device {fp} units {shown(info['units'])} out of range"
        )
    memory = info.get("memory_bytes")
    if memory is not None and (not is_int(memory) or not 0 <= memory <= INT64_MAX):
        raise BundleError(
            f"bundle line {number}: device {fp} memory_bytes must be a non-negative integer "
            f"or null, got {shown(memory)}"
        )
    if fingerprint_of(info) != fp:
        raise BundleError(f"bundle line {number}: device fingerprint {fp} does not match its info")
    return fp, info


def problem_record(record: dict[str, Any], number: int) -> tuple[int, dict[str, Any]]:
    pid, key = record.get("id"), record.get("key")
    if not is_int(pid):
        raise BundleError(f"bundle line {number}: problem id {pid!r} is not an integer")
    # Bundles written before a field of KEY_DEFAULTS existed lack it: it has its default.
    if isinstance(key, dict) and set(KEY_FIELDS) - set(key) <= set(KEY_DEFAULTS):
        key = {**KEY_DEFAULTS, **key}
    if not isinstance(key, dict) or set(key) != set(KEY_FIELDS):
        raise BundleError(f"bundle line {number}: problem {pid} key must have exactly {KEY_FIELDS}")
    try:
        problem = ConvProblem.from_key(key)
    except (ValueError, TypeError) as exc:
        raise BundleError(f"bundle line {number}: invalid problem {pid}: {exc}") from None
    if problem.key() != key:
        raise BundleError(f"bundle line {number}: problem {pid} key is not canonical: {key}")
    too_big = [f for f in KEY_FIELDS if is_int(key[f]) and key[f] > INT32_MAX]
    if too_big:
        raise BundleError(f"bundle line {number}: problem {pid} {too_big[0]} is out of range")
    return pid, problem.key()


def measurement_record(record: dict[str, Any], number: int) -> tuple[str, int, MeasurementRow]:
    where = f"bundle line {number}"
    device, problem = record.get("device"), record.get("problem")
    if not isinstance(device, str) or not device:
        raise BundleError(f"{where}: measurement device {device!r} is not a fingerprint")
    if not is_int(problem):
        raise BundleError(f"{where}: measurement problem {problem!r} is not a problem id")
    algorithm = record.get("algorithm")
    if algorithm not in ALGORITHM_NAMES:
        raise BundleError(
            f"{where}: unknown algorithm {algorithm!r} (known: {', '.join(ALGORITHM_NAMES)})"
        )
    # Name the record in every later refusal: line, algorithm, device and problem.
    where = f"bundle line {number} ({algorithm} on device {device[:12]}, problem {problem})"
    status = record.get("status")
    if status not in STATUSES:
        raise BundleError(f"{where}: unknown status {status!r} (known: {', '.join(STATUSES)})")
    for name, limit, pattern in _TEXT_FIELDS:
        value = record.get(name)
        if not isinstance(value, str) or len(value) > limit or not pattern.fullmatch(value):
            allowed = "_ . + = : , -" if pattern is NAME_RE else "_ . + ! -"
            raise BundleError(
                f"{where}: {name} {shown(value)} is invalid (1 to {limit} ASCII letters, "
                f"digits and {allowed})"
            )
    numbers = {
        name: _number(record.get(name, "missing"), name, where) for name in _OPTIONAL_FLOATS
    }
    for name, most in (("reps", INT32_MAX), ("workspace_bytes", INT64_MAX)):
        value = record.get(name)
        if not is_int(value) or value < 0:
            raise BundleError(
                f"{where}: {name} must be a non-negative integer, got {shown(value)}"
            )
        if value > most:
            raise BundleError(
                f"{where}: {name} ({shown(value)}) is out of range (at most {most})"
            )
    for name in _TIMES if status != "ok" else _OPTIONAL_FLOATS:
        value = numbers[name]
        if value is not None and not math.isfinite(value):
            raise BundleError(f"{where}: {name} {value!r} is not a finite number")
    time_ms = numbers["time_ms"]
    if status == "ok" and (time_ms is None or time_ms <= 0):
        raise BundleError(f"{where}: an ok measurement needs a positive time, got {time_ms!r}")
    # Times, spreads (an interquartile range) and errors (absolute values and norms) are
    # never negative; NaN, which a wrong_result row may carry, is not below zero.
    for name, value in numbers.items():
        if value is not None and value < 0:
            raise BundleError(f"{where}: {name} {value!r} is negative")
    error = record.get("error")
    if error is not None and (not isinstance(error, str) or "\x00" in error
                              or len(error) > ERROR_TEXT_LIMIT):
        # The tuner never keeps more (measuring.failure_text): a longer text came from
        # elsewhere, and a store would keep every byte of it, as long as a push body allows.
        raise BundleError(f"{where}: error must be a string of at most {ERROR_TEXT_LIMIT} "
                          "characters (without NUL) or null")
    try:
        measured_at = datetime.fromisoformat(str(record.get("measured_at")))
    except ValueError:
        raise BundleError(
            f"{where}: measured_at {record.get('measured_at')!r} is not ISO 8601"
        ) from None
    if measured_at.tzinfo is None:
        raise BundleError(f"{where}: measured_at {measured_at.isoformat()} has no timezone")
    try:
        # The store keeps UTC (SQLite drops the offset): compare and store the instant.
        measured_at = measured_at.astimezone(timezone.utc)
    except OverflowError:
        raise BundleError(
            f"{where}: measured_at {measured_at.isoformat()} is out of range"
        ) from None
    if measured_at > utcnow() + CLOCK_SKEW:
        raise BundleError(
            f"{where}: measured_at {measured_at.isoformat()} is in the future (this host's "
            f"clock allows {CLOCK_SKEW.total_seconds() / 60:g} minutes of skew)"
        )
    row = MeasurementRow(
        algorithm=algorithm, config=record["config"], impl_hash=record["impl_hash"],
        status=status, time_ms=time_ms, spread_ms=numbers["spread_ms"],
        min_ms=numbers["min_ms"], reps=record["reps"], workspace_bytes=record["workspace_bytes"],
        max_error=numbers["max_error"], rel_error=numbers["rel_error"], error=error,
        measured_at=measured_at, tuner_version=record["tuner_version"],
    )
    return device, problem, row


def check_verdict(row: MeasurementRow, key: dict[str, Any], number: int) -> None:
    """BundleError unless an ok or wrong_result row's relative error agrees with its status
    under the tolerance of its own dtype, algorithm and math (tuner.measuring decides so).

    A review of security (2026-11-30): an ok row with an error of 1e9 was stored and served
    as the answer. Call it only for rows of this process's implementation hash, which covers
    the tolerances (algorithms.registry.SHARED_SOURCES): another version's rows were judged
    by its own, and are never served here.
    """
    if row.status not in ("ok", "wrong_result"):
        return
    if row.rel_error is None:  # this code records the error of every row it verified
        raise BundleError(f"bundle line {number} ({row.algorithm}/{row.config}): status "
                          f"{row.status} without the relative error that decided it")
    limit = tolerance(key["dtype"], row.algorithm, key["math"])
    if within(row.rel_error, limit) != (row.status == "ok"):
        raise BundleError(
            f"bundle line {number} ({row.algorithm}/{row.config}): status {row.status} with a "
            f"relative error of {row.rel_error:.3g}, where the tolerance is {limit:g}"
        )
