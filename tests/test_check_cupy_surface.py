"""benchmarks/check_cupy_surface.py: names and calls checked against a module's real
signatures, on stand-in CuPy modules here (and on the real CuPy where it is installed)."""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from benchmarks.check_cupy_surface import check_source, docstring_signature, main


class _CythonFunction:
    """A callable whose signature only its docstring says, as a Cython def's."""

    __signature__ = "unknown"  # inspect.signature raises TypeError, as for Cython functions

    def __init__(self, doc: str) -> None:
        self.__doc__ = doc

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        """Never called: the checker reads source."""


def _sig(doc: str) -> inspect.Signature:
    found = docstring_signature(_CythonFunction(doc))
    assert found is not None
    return found


def test_cython_docstrings_become_signatures() -> None:
    launch = _sig("launchKernel(intptr_t f, unsigned int grid_dim_x, intptr_t extra)")
    launch.bind(1, 2, 3)
    with pytest.raises(TypeError):
        launch.bind(1, 2)
    raw = _sig("RawKernel(str code, str name, tuple options=(), str backend='nvrtc', *, "
               "bool enable_cooperative_groups=False, jitify=None)")
    raw.bind("code", "name", ("-O3",), enable_cooperative_groups=True)
    with pytest.raises(TypeError):
        raw.bind("code", "name", (), "nvrtc", True)  # a keyword-only one by position
    ufunc = _sig("isfinite(x, /, out=None, \\*, casting='same_kind', dtype=None)")
    ufunc.bind(1, casting="no")
    with pytest.raises(TypeError):
        ufunc.bind(x=1)  # positional only
    plan = _sig("PlanNd(shape, int istride, intptr_t prealloc_plan=0, *)")  # a bare last star
    plan.bind((4,), 1)
    assert docstring_signature(_CythonFunction("Returns the device.")) is None


@pytest.fixture
def stand_in_cupy(monkeypatch: pytest.MonkeyPatch) -> None:
    """`cupy`, `cupy.cuda` and `cupy.cuda.driver` as modules with one Cython-like function,
    one Python function and one class each where needed."""
    cupy, cuda, driver = ModuleType("cupy"), ModuleType("cupy.cuda"), ModuleType("cupy.cuda.driver")
    driver.launchKernel = _CythonFunction(  # type: ignore[attr-defined]
        "launchKernel(intptr_t f, unsigned int grid, intptr_t params, intptr_t extra)")

    def get_current_stream(device_id: int = -1) -> None:
        """Python-level: inspect.signature reads it."""

    cuda.driver = driver  # type: ignore[attr-defined]
    cuda.get_current_stream = get_current_stream  # type: ignore[attr-defined]
    cupy.cuda = cuda  # type: ignore[attr-defined]
    for module in (cupy, cuda, driver):
        monkeypatch.setitem(sys.modules, module.__name__, module)


_GOOD = """
import cupy
import cupy as cp
from cupy.cuda import driver as drv


def run() -> None:
    drv.launchKernel(1, 2, 3, 0)
    cupy.cuda.get_current_stream()
    cp.cuda.get_current_stream(device_id=0)
    drv.launchKernel(*(1, 2, 3, 0))  # starred: not bound
    other.launchKernel(1)  # not CuPy
"""


def test_what_fits_passes(stand_in_cupy: None) -> None:
    findings, resolved, unchecked = check_source(_GOOD, "good.py")
    assert findings == []
    assert {"cupy.cuda.driver.launchKernel", "cupy.cuda.get_current_stream"} <= resolved
    assert unchecked == set()


@pytest.mark.parametrize("line, what, why", [
    # Injected bugs, one per line: each must be found, and only it.
    ("drv.launchKernel(1, 2, 3)", "cupy.cuda.driver.launchKernel(...)",
     "missing a required argument: 'extra'"),
    ("cupy.cuda.get_current_stream(device=0)", "cupy.cuda.get_current_stream(...)",
     "unexpected keyword argument 'device'"),
    ("cupy.cuda.get_current_streams()", "cupy.cuda.get_current_streams",
     "no cupy.cuda.get_current_streams"),
    ("x = cupy.cuda.Graph", "cupy.cuda.Graph", "no cupy.cuda.Graph"),
])
def test_each_injected_misuse_is_found(stand_in_cupy: None, line: str, what: str,
                                       why: str) -> None:
    source = _GOOD + f"\n\ndef bad() -> None:\n    {line}\n"
    findings, _, _ = check_source(source, "bad.py")
    assert [(f.where, f.what) for f in findings] == [(f"bad.py:{source.count(chr(10))}", what)]
    assert why in findings[0].why


@pytest.mark.skipif(importlib.util.find_spec("cupy") is None,
                    reason="CuPy is not installed: the real surface is checked where it is")
def test_our_code_fits_the_installed_cupy(capsys: pytest.CaptureFixture[str]) -> None:
    root = Path(__file__).resolve().parents[1]
    paths = [str(root / p) for p in ("algorithms", "tuner", "benchmarks", "tests/gpu")]
    assert main(paths) == 0, capsys.readouterr().out
