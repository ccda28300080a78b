"""Claims: one tuner at a time measures a (device, problem), across threads, processes, hosts.

Before measuring, a tuner claims the (device fingerprint, problem) in the store's `claims`
table, renews the claim every ttl/3 seconds from a background thread while it measures,
and deletes it when the results are stored (renewals wait until no candidate is being
timed: tuner.quiet). Another tuner that finds the claim taken polls
(with backoff, at most `wait_s` seconds, then ClaimTimeout) until the results it needs are
stored; a claim that expired (its tuner crashed) is taken over, and so, at once, is a claim
of a process on this host that no longer exists (a `kill -9` would otherwise stall the next
run until the claim expires). While waiting, the log says who holds the claim and until when.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from db import claims
from db.engine import Store
from tuner.env import env_number
from tuner.errors import ClaimTimeout
from tuner.quiet import periodic

log = logging.getLogger("convtune.claims")

T = TypeVar("T")

#: How long a claim lasts unless renewed ($CONVTUNE_CLAIM_TTL_S).
CLAIM_TTL_S = 60.0
#: How long a tuner waits for another one's claim before giving up ($CONVTUNE_CLAIM_WAIT_S).
CLAIM_WAIT_S = 900.0


@dataclass(frozen=True)
class ClaimPolicy:
    """How long a claim lasts and how long to wait for someone else's."""

    ttl_s: float = CLAIM_TTL_S
    wait_s: float = CLAIM_WAIT_S

    @classmethod
    def from_env(cls, ttl_s: float | None = None, wait_s: float | None = None) -> ClaimPolicy:
        """The given values, else $CONVTUNE_CLAIM_TTL_S / $CONVTUNE_CLAIM_WAIT_S, else defaults."""
        return cls(
            ttl_s=ttl_s or env_number("CONVTUNE_CLAIM_TTL_S", CLAIM_TTL_S, float, positive=True),
            wait_s=wait_s or env_number("CONVTUNE_CLAIM_WAIT_S", CLAIM_WAIT_S, float,
                                        positive=True),
        )


def pid_namespace() -> str:
    """This process's PID namespace (its inode under /proc), or "" where there is none."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return ""


def new_owner() -> str:
    """A claim owner id, unique across a fleet: host:pid:random:pid-namespace."""
    return (f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}:"
            f"{pid_namespace()}")


def owner_is_dead(owner: str) -> bool:
    """Whether `owner` names a process of this host and PID namespace that no longer runs.

    Owners on other hosts or in other PID namespaces (containers sharing the host's name:
    a PID there means nothing here), or that do not parse, are presumed alive: only expiry
    frees them.
    """
    fields = owner.split(":")
    if len(fields) != 4:  # an older tuner's host:pid:random says no namespace
        return False
    host, pid_text, _, namespace = fields
    if (host != socket.gethostname() or not pid_text.isdigit()
            or namespace != pid_namespace()):
        return False
    try:
        os.kill(int(pid_text), 0)  # signal 0: existence check only
    except ProcessLookupError:
        return True
    except (PermissionError, OSError):  # exists (another user's), or cannot tell
        return False
    return _zombie(int(pid_text))


def _zombie(pid: int) -> bool:
    """Whether process `pid` has exited and waits to be reaped: signal 0 still finds it, and
    a tuner killed by a supervisor that never waited held its claims until they expired
    (62 s against 4 s once reaped; a review of concurrency, 2026-11-30)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # no /proc (macOS), or gone meanwhile: signal 0's answer stands
        return False
    # "pid (comm) state ...": comm may hold spaces and parentheses; the state is the first
    # field after the last ")".
    return stat.rpartition(")")[2].split()[:1] == ["Z"]


class Claimer:
    """Runs work under a store claim, or waits for the claim holder's results."""

    def __init__(self, store: Store, policy: ClaimPolicy, owner: str) -> None:
        self.store = store
        self.policy = policy
        self.owner = owner

    def run(
        self, fingerprint: str, target: str, what: str,
        work: Callable[[], T], ready: Callable[[], T | None],
    ) -> T:
        """`work()` under our claim on (fingerprint, target), or what `ready()` finds stored.

        While another tuner holds the claim, `ready()` is polled with backoff: the first
        non-None answer is returned without measuring. `what` names the problem and device
        in the ClaimTimeout message.
        """
        deadline = time.monotonic() + self.policy.wait_s
        delay = 0.02
        told = False
        while True:
            if self._claim(fingerprint, target) or self._take_over_dead(fingerprint, target):
                try:
                    with self._renewing(fingerprint, target):
                        return work()
                finally:
                    self._release(fingerprint, target)
            found = ready()
            if found is not None:
                return found
            if not told:
                told = True
                holder = self._holder(fingerprint, target)
                if holder is not None:
                    log.warning("%s is being measured by %s (claim until %s); waiting up to "
                                "%g s", what, holder["owner"],
                                holder["expires_at"].isoformat(timespec="seconds"),
                                self.policy.wait_s)
            if time.monotonic() >= deadline:
                with self.store.session() as session:
                    holder = claims.claim_holder(
                        session=session, fingerprint=fingerprint, problem=target
                    )
                who = holder["owner"] if holder else "another tuner"
                raise ClaimTimeout(
                    f"{what} is being measured by {who}; gave up after "
                    f"{self.policy.wait_s:g} s (raise $CONVTUNE_CLAIM_WAIT_S to wait longer)"
                )
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 1.5, 1.0, self.policy.ttl_s / 4)

    def _holder(self, fingerprint: str, target: str) -> dict[str, Any] | None:
        with self.store.session() as session:
            return claims.claim_holder(session=session, fingerprint=fingerprint,
                                       problem=target)

    def _take_over_dead(self, fingerprint: str, target: str) -> bool:
        """Claim it now if its holder is a dead process of this host, or this Claimer
        itself (a claim whose release failed, as the write before it did, would otherwise
        hold up our own next attempt until it expires)."""
        holder = self._holder(fingerprint, target)
        if holder is None:
            return False
        if holder["owner"] == self.owner:
            log.info("taking back our own claim on %s, left by a failed release", target)
        elif owner_is_dead(holder["owner"]):
            log.warning("taking over the claim of %s: that process no longer runs",
                        holder["owner"])
        else:
            return False
        with self.store.session() as session:
            claims.release_claim(session=session, fingerprint=fingerprint, problem=target,
                                 owner=holder["owner"])
        return self._claim(fingerprint, target)

    def _claim(self, fingerprint: str, target: str) -> bool:
        with self.store.session() as session:
            return claims.try_claim(
                session=session, fingerprint=fingerprint, problem=target,
                owner=self.owner, ttl_s=self.policy.ttl_s,
            )

    def _release(self, fingerprint: str, target: str) -> None:
        with self.store.session() as session:
            claims.release_claim(
                session=session, fingerprint=fingerprint, problem=target, owner=self.owner,
            )

    @contextmanager
    def _renewing(self, fingerprint: str, target: str) -> Iterator[None]:
        """Renew our claim every ttl/3 seconds in a background thread while measuring.

        Renewals run between timed regions (tuner.quiet), never while a candidate is timed:
        a timed region longer than 2/3 of the ttl risks only duplicate work.
        """

        def renew() -> None:
            try:
                with self.store.session() as session:
                    ours = claims.renew_claim(
                        session=session, fingerprint=fingerprint, problem=target,
                        owner=self.owner, ttl_s=self.policy.ttl_s,
                    )
                if not ours:
                    log.warning("claim on %s was taken over while measuring", target)
            except Exception:  # a missed renewal only risks duplicate work
                log.warning("could not renew the claim on %s", target, exc_info=True)

        with periodic(renew, self.policy.ttl_s / 3, "convtune-claim"):
            yield
