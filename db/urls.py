"""Database URLs: checked before anything is opened, and printed without their secrets."""

from __future__ import annotations

import re
from urllib.parse import unquote_plus

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError


def check_url(url: str) -> URL:
    """`url` parsed, if it names a backend we can load; else ValueError, one line (nothing
    is opened or created: a server checks its URL at start)."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:  # ValueError: a port that is not a number
        raise ValueError(f"invalid database URL {describe_url(url)!r}: {exc}") from None
    try:
        parsed.get_dialect().import_dbapi()  # the driver too: a missing one is unsupported
    except NoSuchModuleError as exc:
        raise ValueError(f"unsupported database URL {describe_url(url)!r}: {exc}") from None
    except ImportError as exc:  # a known backend whose driver is not installed
        extra = " (pip install 'convtune[postgres]')" if parsed.get_backend_name() == (
            "postgresql") else ""
        raise ValueError(f"the driver of database URL {describe_url(url)!r} is not installed: "
                         f"{exc}{extra}") from None
    return parsed


#: A query parameter naming a secret (libpq's password=, sslpassword=, ...) and its value: a
#: password given so printed in clear (a review of security, 2026-11-30).
_PARAM = re.compile(r"([?&])([^=&]*)=([^&]*)")
_SECRET_WORDS = ("pass", "secret", "token")


def _masked_param(match: re.Match[str]) -> str:
    # The name as SQLAlchemy reads it: p%61ssword is password (the review of the session's
    # changes, 2026-11-30).
    name = unquote_plus(match.group(2)).lower()
    secret = any(word in name for word in _SECRET_WORDS)
    return f"{match.group(1)}{match.group(2)}={'***' if secret else match.group(3)}"


def describe_url(url: str) -> str:
    """`url` fit to print: any password hidden, in the query too, by its shape (also where
    the URL does not parse)."""
    return _PARAM.sub(_masked_param, re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url))
