"""Service settings, read from the environment (CONVTUNE_*) or passed to create_app."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from tuner.devices import parse_device
from tuner.env import env_number, timing_policy
from tuner.racing import RacePolicy
from tuner.service import check_url, default_url
from tuner.signing import ENV_PULL_KEY, fleet_key

MIB = 1024 * 1024


def _int(name: str, default: int) -> int:
    return env_number(name, default, int)


@dataclass(frozen=True)
class Settings:
    """Everything the service is configured with; immutable once the app is built."""

    #: SQLAlchemy URL of the results database ($CONVTUNE_DB_URL, else the library default).
    db_url: str = field(default_factory=default_url)
    #: Default device when a request names none ($CONVTUNE_DEVICE; None: the library default).
    device: str | None = None
    #: Bearer token required by every POST endpoint when set ($CONVTUNE_API_TOKEN).
    api_token: str | None = None
    #: Token of the read scope (cached finds, GETs; $CONVTUNE_READ_TOKEN): unset, reads
    #: are open; set, reads need it or the write token ($CONVTUNE_API_TOKEN).
    read_token: str | None = None
    #: Fleet key ($CONVTUNE_FLEET_KEY): when set, pushed bundles must carry its HMAC
    #: signature (tuner.signing), and exported bundles are signed with it unless a pull key
    #: is set.
    fleet_key: str | None = None
    #: Pull key ($CONVTUNE_PULL_KEY): when set, exported bundles are signed with it instead
    #: of the fleet key, so that consumers checking them need not hold the key of pushes.
    pull_key: str | None = None
    #: Largest request body accepted, in bytes ($CONVTUNE_MAX_BODY_BYTES).
    max_body_bytes: int = 64 * MIB
    #: Largest tensor (input, filter or output) of any problem, in elements
    #: ($CONVTUNE_MAX_TENSOR_ELEMENTS).
    max_tensor_elements: int = 16 * MIB
    #: Largest problem, in FLOPs of a direct convolution ($CONVTUNE_MAX_PROBLEM_FLOPS).
    max_problem_flops: int = 10**12
    #: Jobs queued or running at once; more are refused with 429 ($CONVTUNE_MAX_JOBS).
    max_jobs: int = 16
    #: Problems in one job ($CONVTUNE_MAX_JOB_PROBLEMS).
    max_job_problems: int = 1000
    #: Finds that may measure, and convolutions, running at once in one server process;
    #: more are refused with 429 ($CONVTUNE_MAX_RUNNING; jobs are counted apart).
    max_running: int = 4
    #: Threads that run jobs ($CONVTUNE_JOB_WORKERS).
    job_workers: int = 1
    #: Finished jobs kept for GET /v1/jobs/{id} ($CONVTUNE_JOBS_KEPT).
    jobs_kept: int = 256

    @classmethod
    def from_env(cls) -> Settings:
        """Settings from $CONVTUNE_* variables, defaults for the rest."""
        base = cls(db_url="")
        return cls(
            db_url=os.environ.get("CONVTUNE_DB_URL") or default_url(),
            device=os.environ.get("CONVTUNE_DEVICE") or None,
            api_token=os.environ.get("CONVTUNE_API_TOKEN") or None,
            read_token=os.environ.get("CONVTUNE_READ_TOKEN") or None,
            fleet_key=fleet_key(),
            pull_key=os.environ.get(ENV_PULL_KEY) or None,
            max_body_bytes=_int("CONVTUNE_MAX_BODY_BYTES", base.max_body_bytes),
            max_tensor_elements=_int("CONVTUNE_MAX_TENSOR_ELEMENTS", base.max_tensor_elements),
            max_problem_flops=_int("CONVTUNE_MAX_PROBLEM_FLOPS", base.max_problem_flops),
            max_jobs=_int("CONVTUNE_MAX_JOBS", base.max_jobs),
            max_job_problems=_int("CONVTUNE_MAX_JOB_PROBLEMS", base.max_job_problems),
            max_running=env_number("CONVTUNE_MAX_RUNNING", base.max_running, int,
                                   positive=True),
            job_workers=max(1, _int("CONVTUNE_JOB_WORKERS", base.job_workers)),
            # Positive: with none kept, each job was pruned by the write that finished it
            # and every client's poll found a 404 (a review of concurrency, 2026-11-30).
            jobs_kept=env_number("CONVTUNE_JOBS_KEPT", base.jobs_kept, int, positive=True),
        )


log = logging.getLogger(__name__)


def check_config(settings: Settings) -> None:
    """ValueError, one line naming the setting, for a configuration the server cannot run."""
    # Each of these was first read inside a request, where the ValueError it raised became
    # a 422: the client was told its input was wrong when the server was misconfigured.
    _check_db_url(settings.db_url or default_url())
    if settings.read_token and not settings.api_token:
        # Reads closed and writes open: surely not meant (a review of security, 2026-11-30).
        raise ValueError("$CONVTUNE_READ_TOKEN is set but $CONVTUNE_API_TOKEN is not: anyone "
                         "could tune, convolve and push bundles; set $CONVTUNE_API_TOKEN too")
    if settings.pull_key and settings.pull_key == settings.fleet_key:
        log.warning("convtune: $CONVTUNE_PULL_KEY is $CONVTUNE_FLEET_KEY: a host that checks "
                    "its pulls can sign pushes; give them different secrets")
    elif settings.pull_key and not settings.fleet_key:
        log.warning("convtune: $CONVTUNE_PULL_KEY is set without $CONVTUNE_FLEET_KEY: pushed "
                    "bundles need no signature (the write token alone guards them)")
    if settings.device is not None:
        try:
            parse_device(settings.device)
        except ValueError as exc:
            raise ValueError(f"$CONVTUNE_DEVICE: {exc}") from None
    timing_policy()  # its messages name the variable
    try:
        RacePolicy.from_env()
    except ValueError as exc:
        text = str(exc)
        if "$CONVTUNE_" not in text:  # a bound of the policy itself, worded by field name
            text = f"$CONVTUNE_RACE_* variables: {text}"
        raise ValueError(text) from None


def _check_db_url(url: str) -> None:
    """ValueError unless `url` parses and names a backend db.engine can open; nothing is
    opened, created or read here: a store broken at its location stays a 503 of the
    requests that use it, not a server that will not start."""
    try:
        check_url(url)
    except ValueError as exc:
        raise ValueError(f"$CONVTUNE_DB_URL: {exc}") from None
