"""Bundles: a store's measurements as one portable, versioned, self-checking file.

A bundle is JSON lines (UTF-8, one compact JSON object per line, keys sorted):

1. a header: {"format": "convtune-bundle", "version": 1, "created_at", "tuner_version",
   "schema_version"};
2. device records: {"type": "device", "fingerprint", "info"}, where info holds every
   fingerprint field and the fingerprint is its hash (tuner.devices.fingerprint_of);
3. problem records: {"type": "problem", "id", "key"}: key is ConvProblem.key(), id is
   local to the bundle;
4. measurement records: {"type": "measurement", "device": fingerprint, "problem": id,
   "algorithm", "config", "impl_hash", "status", "time_ms", "spread_ms", "min_ms", "reps",
   "workspace_bytes", "max_error", "rel_error", "error", "measured_at" (ISO 8601 with zone),
   "tuner_version"};
5. a trailer: {"type": "trailer", "devices", "problems", "measurements", "sha256"}: record
   counts and the sha256 of every byte before the trailer line (header included), so a
   truncated or edited file is detected.

Reading validates the whole file before anything is written: a foreign or corrupt file,
or an impossible value (an ok row without a positive finite time, a negative time or error,
a number too large for a float, a config, impl_hash or tuner_version outside
tuner.bundle_records.NAME_RE or VERSION_RE, a measured_at past this host's clock plus
CLOCK_SKEW, a newer schema_version),
raises BundleError with a one-line message naming the record and leaves the store
untouched. Importing merges in one transaction (db.bundles.merge_records): re-importing is
a no-op, a newer measurement of the same (device, problem, algorithm, config, impl_hash)
replaces an older one, and an older one never replaces a newer one; "newer" is capped by
the receiving store's clock.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.exc import IntegrityError, OperationalError

from algorithms.registry import BACKEND_MODULES, backend
from db.bundles import export_records, merge_records
from db.engine import Store
from db.migrations import SCHEMA_VERSION
from db.rows import MeasurementRow, canonical_json, utcnow
from tuner.bundle_records import (
    BundleError,
    check_verdict,
    device_record,
    is_int,
    json_record,
    measurement_record,
    problem_record,
    shown,
)
from tuner.version import TUNER_VERSION

FORMAT = "convtune-bundle"
VERSION = 1
MEDIA_TYPE = "application/x-ndjson"

@dataclass
class Bundle:
    """A validated bundle: its header and records as plain values."""

    header: dict[str, Any]
    devices: dict[str, dict[str, Any]] = field(default_factory=dict)  # fingerprint -> info
    problems: dict[int, dict[str, Any]] = field(default_factory=dict)  # local id -> key
    measurements: list[tuple[str, int, MeasurementRow]] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """How many records of each kind the bundle holds."""
        return {
            "devices": len(self.devices),
            "problems": len(self.problems),
            "measurements": len(self.measurements),
        }


def _line(record: dict[str, Any]) -> str:
    return canonical_json(record) + "\n"


# --- writing -------------------------------------------------------------------------------
def export_bundle(store: Store, *, device: str | None = None) -> str:
    """The bundle text of every measurement in `store`, or of the devices whose fingerprint
    starts with `device` (ValueError when none does)."""
    with store.session() as session:
        devices, problems, measurements = export_records(session=session, device=device)
    lines = [_line({
        "format": FORMAT, "version": VERSION, "created_at": utcnow().isoformat(),
        "tuner_version": TUNER_VERSION, "schema_version": SCHEMA_VERSION,
    })]
    lines += [_line({"type": "device", **d}) for d in devices]
    lines += [_line({"type": "problem", **p}) for p in problems]
    lines += [
        _line({"type": "measurement", "device": fp, "problem": pid, **row.as_dict()})
        for fp, pid, row in measurements
    ]
    digest = hashlib.sha256("".join(lines).encode()).hexdigest()
    lines.append(_line({
        "type": "trailer", "devices": len(devices), "problems": len(problems),
        "measurements": len(measurements), "sha256": digest,
    }))
    return "".join(lines)


# --- reading -------------------------------------------------------------------------------
def _check_header(header: dict[str, Any]) -> None:
    if header.get("format") != FORMAT:
        raise BundleError(
            f"not a convtune bundle: the header's format is {header.get('format')!r}, "
            f"expected {FORMAT!r}"
        )
    version = header.get("version")
    if not is_int(version) or version < 1:
        raise BundleError(f"bundle header has an invalid version {shown(version)}")
    if version > VERSION:
        raise BundleError(
            f"bundle format version {shown(version)} is newer than this convtune reads "
            f"({VERSION}); upgrade convtune"
        )
    schema = header.get("schema_version")
    if not is_int(schema) or schema < 1:
        raise BundleError(f"bundle header has an invalid schema_version {shown(schema)}")
    if schema > SCHEMA_VERSION:
        raise BundleError(
            f"bundle schema_version {shown(schema)} is newer than this convtune's "
            f"({SCHEMA_VERSION}); upgrade convtune"
        )


def _current_hashes(kinds: set[str]) -> dict[str, str]:
    """This process's implementation hash of each backend among device `kinds`."""
    return {kind: backend(kind).implementation_hash() for kind in kinds
            if kind in BACKEND_MODULES}


def read_bundle(data: str | bytes) -> Bundle:
    """Parse and validate a whole bundle; BundleError (one line) for anything wrong."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError:
            raise BundleError("not a convtune bundle: the file is not UTF-8 text") from None
    lines = data.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline
    if not lines or not lines[0].strip():
        raise BundleError("not a convtune bundle: the file is empty")
    try:
        header = json.loads(lines[0])
    except (ValueError, RecursionError):
        raise BundleError("not a convtune bundle: the first line is not a JSON header") from None
    if not isinstance(header, dict):
        raise BundleError("not a convtune bundle: the first line is not a JSON header")
    _check_header(header)
    try:
        last = json.loads(lines[-1]) if len(lines) > 1 else {}
    except (ValueError, RecursionError):
        last = {}
    if not isinstance(last, dict) or last.get("type") != "trailer":
        raise BundleError(
            f"bundle is truncated: no trailer line at the end ({len(lines)} lines read)"
        )
    body = "".join(line + "\n" for line in lines[:-1])
    if hashlib.sha256(body.encode()).hexdigest() != last.get("sha256"):
        raise BundleError("bundle checksum mismatch: the file is corrupt or was edited")
    bundle = Bundle(header=header)
    numbers: list[int] = []  # each measurement's line, in bundle.measurements' order
    for number, text in enumerate(lines[1:-1], start=2):
        record = json_record(text, number)
        kind = record.get("type")
        if kind == "device":
            fp, info = device_record(record, number)
            bundle.devices[fp] = info
        elif kind == "problem":
            pid, key = problem_record(record, number)
            if pid in bundle.problems:
                raise BundleError(f"bundle line {number}: problem id {pid} appears twice")
            bundle.problems[pid] = key
        elif kind == "measurement":
            fp, pid, row = measurement_record(record, number)
            bundle.measurements.append((fp, pid, row))
            numbers.append(number)
        else:
            raise BundleError(f"bundle line {number}: unknown record type {kind!r}")
    hashes = _current_hashes({info["kind"] for info in bundle.devices.values()})
    for number, (fp, pid, row) in zip(numbers, bundle.measurements, strict=True):
        if fp not in bundle.devices:
            raise BundleError(f"bundle line {number}: measurement of unknown device {fp!r}")
        if pid not in bundle.problems:
            raise BundleError(f"bundle line {number}: measurement of unknown problem {pid!r}")
        if row.impl_hash == hashes.get(bundle.devices[fp]["kind"]):
            check_verdict(row, bundle.problems[pid], number)
    expected = {k: last.get(k) for k in ("devices", "problems", "measurements")}
    if expected != bundle.counts():
        raise BundleError(
            f"bundle trailer counts {expected} do not match its records {bundle.counts()}"
        )
    return bundle


def import_bundle(store: Store, data: str | bytes) -> dict[str, int]:
    """Validate a bundle, then merge it into `store` in one transaction.

    Returns the bundle's record counts and the merge counts (added, replaced, unchanged,
    older_ignored). BundleError, before anything is written, for an invalid bundle.
    """
    bundle = read_bundle(data)
    for attempt in range(3):
        try:
            with store.session() as session:
                merged = merge_records(
                    session=session, devices=bundle.devices, problems=bundle.problems,
                    measurements=bundle.measurements,
                )
            return {**bundle.counts(), **merged}
        except (IntegrityError, OperationalError):
            # A tuner stored one of the same rows meanwhile: merge again against it.
            if attempt == 2:
                raise
    raise AssertionError("unreachable")
