"""The suite where CuPy is installed but no GPU is (a CPU machine with the cuda extra): CuPy
imports there, and every call that needs a device fails."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: A CuPy that imports and has no device, as the real one on a machine without a driver.
_NO_DEVICE_CUPY = '''
"""Stand-in: CuPy without a usable device."""
__version__ = "14.2.0"


class _NoDevice(RuntimeError):
    pass


def _fail(*args, **kwargs):
    raise _NoDevice("cudaErrorInsufficientDriver: no CUDA driver here")


class _Runtime:
    getDeviceCount = staticmethod(_fail)


class cuda:
    runtime = _Runtime
    get_current_stream = staticmethod(_fail)


zeros = _fail
'''


# Regression: with CuPy installed and no GPU, the host checks' split-K runs took their tile
# counters from CuPy's device memory and failed (14 tests): the conftest asked whether CuPy
# was installed, not whether a GPU was usable.
def test_host_checks_pass_where_cupy_is_installed_without_a_gpu(tmp_path: Path) -> None:
    (tmp_path / "cupy").mkdir()
    (tmp_path / "cupy" / "__init__.py").write_text(_NO_DEVICE_CUPY)
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(root)])}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "implicit_gemm_tc",
         "tests/test_cuda_work.py"],
        cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "failed" not in done.stdout
