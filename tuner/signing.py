"""Signed bundles: an HMAC-SHA256 of the bundle bytes with a fleet key shared by trusted hosts.

A bundle's own sha256 only detects accidents; anyone can recompute it. With
$CONVTUNE_FLEET_KEY set on a server, a push must carry SIGNATURE_HEADER made with the same
key (`convtune push` adds it when the key is set where it runs), so only hosts holding the
key can add measurements. The server signs the bundles it exports the same way, and
`convtune pull` checks that signature when it holds the key.
"""

from __future__ import annotations

import hashlib
import hmac
import os

ENV_FLEET_KEY = "CONVTUNE_FLEET_KEY"
SIGNATURE_HEADER = "X-Convtune-Signature"
_SCHEME = "hmac-sha256="


def fleet_key() -> str | None:
    """$CONVTUNE_FLEET_KEY, or None when unset or empty."""
    return os.environ.get(ENV_FLEET_KEY) or None


def sign(data: bytes, key: str) -> str:
    """The signature header value of `data` under `key`."""
    return _SCHEME + hmac.new(key.encode(), data, hashlib.sha256).hexdigest()


def signature_refusal(data: bytes, signature: str | None, key: str) -> str | None:
    """Why `signature` does not vouch for `data` under `key` (one line), or None."""
    if not signature:
        return (f"missing {SIGNATURE_HEADER}: this server accepts only bundles signed with "
                f"the fleet key (set ${ENV_FLEET_KEY} where you push)")
    if not hmac.compare_digest(signature.strip().encode(), sign(data, key).encode()):
        return f"invalid {SIGNATURE_HEADER}: the bundle was not signed with this fleet key"
    return None
