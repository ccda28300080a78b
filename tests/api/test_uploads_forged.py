"""Forged .npy headers and odd-but-valid uploads: a 4xx or a correct answer, never a 500."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from algorithms.reference import reference_conv
from tests.api.conftest import from_npy, stored_rows
from tests.api.test_convolve import convolve
from tuner.api import problem_for


def forged(shape: str, descr: str = "<f4", data: bytes = b"") -> bytes:
    """A version 1.0 .npy file whose header says `shape` (a Python literal), then `data`."""
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}".encode()
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + data


W = np.ones((2, 2, 3, 3), np.float32)


@pytest.mark.parametrize("shape", ["(True, 2, 6, 5)", "(1, 2, False, 5)", "(-1, 2, 6, 5)"])
def test_forged_shape_entries_are_400(client: TestClient, db_url: str, shape: str) -> None:
    response = convolve(client, forged(shape, data=b"\0" * 240), W)
    assert response.status_code == 400, response.text
    assert "x is not a valid .npy file" in response.json()["detail"]
    assert stored_rows(db_url) == 0


@pytest.mark.parametrize(
    "shape", ["(4294967296, 4294967296, 1, 1)", "(3037000500, 3037000500, 1, 1)"]
)
def test_header_whose_size_wraps_int64_is_413(make_client: Any, db_url: str, shape: str) -> None:
    # 2**32 * 2**32 wraps to 0 in int64: the element limit must see the true count.
    response = convolve(make_client(), forged(shape), W)
    assert response.status_code == 413, response.text
    assert "CONVTUNE_MAX_TENSOR_ELEMENTS" in response.json()["detail"]
    assert stored_rows(db_url) == 0


@pytest.mark.parametrize("layout", ["fortran", "big-endian"])
def test_fortran_and_big_endian_uploads_convolve_correctly(
    client: TestClient, rng: np.random.Generator, layout: str
) -> None:
    x = rng.standard_normal((2, 4, 7, 6)).astype(np.float32)
    w = rng.standard_normal((3, 4, 3, 3)).astype(np.float32)
    if layout == "fortran":
        xs, ws = np.asfortranarray(x), np.asfortranarray(w)
    else:
        xs, ws = x.astype(">f4"), w.astype(">f4")
    response = convolve(client, xs, ws, padding=1)
    assert response.status_code == 200, response.text
    y = from_npy(response.content)
    problem = problem_for(x.shape, w.shape, padding=1)
    expected = reference_conv(x.astype(np.float64), w.astype(np.float64), problem)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)
