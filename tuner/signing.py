"""Signed bundles: an HMAC-SHA256 of the bundle bytes with a fleet key shared by trusted hosts.

A bundle's own sha256 only detects accidents; anyone can recompute it. With
$CONVTUNE_FLEET_KEY set on a server, a push must carry SIGNATURE_HEADER made with the same
key (`convtune push` adds it when the key is set where it runs), so only hosts holding the
key can add measurements. The server signs the bundles it exports the same way, and
`convtune pull` checks that signature when it holds the key.

A host that holds the fleet key to check its pulls could sign pushes too. So a server may
set a second key, $CONVTUNE_PULL_KEY, to sign what it serves instead: consumers hold only
that one (a review of security, 2026-11-30), and only the tuning hosts the fleet key.
"""

from __future__ import annotations

import hashlib
import hmac
import os

ENV_FLEET_KEY = "CONVTUNE_FLEET_KEY"
ENV_PULL_KEY = "CONVTUNE_PULL_KEY"
SIGNATURE_HEADER = "X-Convtune-Signature"
_SCHEME = "hmac-sha256="


def fleet_key() -> str | None:
    """$CONVTUNE_FLEET_KEY, or None when unset or empty."""
    return os.environ.get(ENV_FLEET_KEY) or None


def _pull_source() -> str:
    """The variable served bundles are checked with here: $CONVTUNE_PULL_KEY where set, else
    $CONVTUNE_FLEET_KEY."""
    return ENV_PULL_KEY if os.environ.get(ENV_PULL_KEY) else ENV_FLEET_KEY


def pull_key() -> str | None:
    """The key served bundles are checked with: $CONVTUNE_PULL_KEY, else the fleet key."""
    return os.environ.get(_pull_source()) or None


def sign(data: bytes, key: str) -> str:
    """The signature header value of `data` under `key`."""
    return _SCHEME + hmac.new(key.encode(), data, hashlib.sha256).hexdigest()


def signature_refusal(data: bytes, signature: str | None, key: str,
                      pulled: bool = False) -> str | None:
    """Why `signature` does not vouch for `data` under `key` (one line), or None; `pulled`:
    a bundle a server served, checked with the pull key."""
    if pulled:  # name the key this host checked with: a tuning host may hold only one
        used = _pull_source()
        if used == ENV_FLEET_KEY:
            used += f", as no ${ENV_PULL_KEY} is set here; the server may sign with its pull key"
        which = f"the key checked here (${used})"
    else:
        which = "this fleet key"
    if not signature:
        if pulled:
            return f"missing {SIGNATURE_HEADER}: the server signed nothing, {which} is set here"
        return (f"missing {SIGNATURE_HEADER}: this server accepts only bundles signed with "
                f"the fleet key (set ${ENV_FLEET_KEY} where you push)")
    if not hmac.compare_digest(signature.strip().encode(), sign(data, key).encode()):
        return f"invalid {SIGNATURE_HEADER}: the bundle was not signed with {which}"
    return None
