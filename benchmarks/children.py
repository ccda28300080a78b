"""Child processes that benchmarks talk to by lines: each says "ready", then answers a line
with a line (bench_tuner's re-measurement, bench_torch_threads' variants)."""

from __future__ import annotations

import os
import subprocess
import sys


class LineChild:
    """A child process started from `argv` (after this Python), with `env` added to ours;
    it is ready once it has printed "ready"."""

    def __init__(self, argv: list[str], what: str, env: dict[str, str] | None = None) -> None:
        self.what = what
        self.process = subprocess.Popen(
            [sys.executable, *argv], env={**os.environ, **(env or {})},
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if self._line() != "ready":
            self.close()
            raise RuntimeError(f"{what} did not start")

    def ask(self, line: str) -> str:
        """Send `line`, return the child's answer."""
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        return self._line()

    def close(self) -> None:
        """End its input, wait for it to exit, and close its output."""
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait()
        if self.process.stdout is not None:  # else a ResourceWarning when it is collected
            self.process.stdout.close()

    def _line(self) -> str:
        """The child's next line of output; RuntimeError where it ended instead."""
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.what} ended early (exit {self.process.wait()})")
        return line.strip()
