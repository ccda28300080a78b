"""Prepared launches on a GPU (algorithms.cuda._launch): the driver's view of a kernel's
parameters, which every prepared launch is checked against when it is built."""

from __future__ import annotations

import numpy as np
import pytest

from algorithms.cuda import _launch
from algorithms.cuda._loader import get_kernel, shape_struct
from algorithms.problem import ConvProblem


def test_the_driver_reports_parameter_sizes() -> None:
    if _launch._param_info() is None:
        pytest.skip("this driver has no cuFuncGetParamInfo (CUDA 12.4+)")
    # Regression (e438c92): get_kernel returns a CuPy Function now, which has no .kernel
    # (a RawKernel's, which this test asked for): the Function is its own handle.
    spin = get_kernel("spin.cu", "spin")
    handle = getattr(spin, "kernel", spin).ptr
    assert _launch.driver_parameter_sizes(handle) == [8]  # one unsigned long long


def test_a_buffer_that_does_not_fit_is_refused_on_a_gpu() -> None:
    if _launch._param_info() is None:
        pytest.skip("this driver has no cuFuncGetParamInfo (CUDA 12.4+)")
    spin = get_kernel("spin.cu", "spin")
    assert _launch.prepare(spin, (1,), (32,), (np.uint64(1),)) is not None
    (shape,) = shape_struct(ConvProblem(n=1, c=1, h=1, w=1, k=1, r=1, s=1))
    with pytest.raises(TypeError, match="driver says"):
        _launch.prepare(spin, (1,), (32,), (shape,))  # 64 bytes where it takes 8
