"""The tuner's errors: each maps to one HTTP status and one CLI line in the front ends."""

from __future__ import annotations


class NoUsableAlgorithm(LookupError):
    """No candidate is usable for this problem on this device under this workspace limit."""


class NotInDatabase(LookupError):
    """mode="cached" and the store has not measured every candidate of this problem."""


class ClaimTimeout(LookupError):
    """Another tuner held its claim on this (device, problem) for longer than we may wait."""


class DeviceFault(RuntimeError):
    """A candidate left the device unable to run anything more in this process."""
