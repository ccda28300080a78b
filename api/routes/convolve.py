"""POST /v1/convolve: run the best (or a named) algorithm on uploaded .npy tensors."""

from __future__ import annotations

import io
import math
from typing import Annotated, Any, BinaryIO

import numpy as np
from fastapi import APIRouter, File, Form, HTTPException, Response, UploadFile, status

from algorithms.problem import DTYPES, parse_pair
from api.deps import RequireToken, Running, ServiceDep, SettingsDep
from api.routes.common import check_tensor_sizes, enforce_limits, request_device
from api.schemas import (
    BUSY,
    MAX_CHANNELS,
    MAX_DEVICE_LEN,
    MAX_DILATION,
    MAX_PAD,
    MAX_STRIDE,
    MAX_WORKSPACE,
    WRITE_RESPONSES,
    ErrorOut,
)
from api.settings import Settings
from tuner.api import problem_for
from tuner.devices import get_runtime

router = APIRouter(prefix="/v1", tags=["convolve"])

def load_npy(upload: UploadFile, name: str, settings: Settings) -> np.ndarray:
    """A 4-D array of a supported dtype from .npy bytes; 400/413/422 naming `name` otherwise.

    The header is checked (dtype, rank, element count) before any data is read; pickles
    are never loaded.
    """
    f: BinaryIO = upload.file  # type: ignore[assignment]
    f.seek(0)
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, _fortran, dtype = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, _fortran, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise ValueError(f"unsupported .npy format version {version}")
    except (ValueError, OSError, EOFError, SyntaxError, TypeError) as exc:
        raise HTTPException(
            status.HTTP_400_BAD_REQUEST, f"{name} is not a valid .npy file: {exc}"
        ) from None
    if dtype.hasobject or dtype.name not in DTYPES:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            f"{name} has dtype {dtype.name}; expected one of {sorted(DTYPES)}",
        )
    if any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in shape):
        # numpy's header check lets bools through (True is an int), and negative sizes
        # would only fail later, inside np.load.
        raise HTTPException(
            status.HTTP_400_BAD_REQUEST,
            f"{name} is not a valid .npy file: its header's shape {tuple(shape)} is not "
            "a tuple of non-negative integers",
        )
    if len(shape) != 4:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            f"{name} must be a 4-D array, got shape {tuple(shape)}",
        )
    elements = math.prod(shape)  # exact: an int64 product of a forged header can wrap
    if elements > settings.max_tensor_elements:
        raise HTTPException(
            status.HTTP_413_CONTENT_TOO_LARGE,
            f"{name} has {elements} elements, the limit is {settings.max_tensor_elements} "
            "(CONVTUNE_MAX_TENSOR_ELEMENTS)",
        )
    f.seek(0)
    try:
        array = np.load(f, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise HTTPException(
            status.HTTP_400_BAD_REQUEST, f"{name} is not a valid .npy file: {exc}"
        ) from None
    if not dtype.isnative:
        array = array.astype(dtype.newbyteorder("="))
    return np.asarray(array)


_HEADERS = {
    "X-Convtune-Algorithm": {"description": "The algorithm that ran.",
                             "schema": {"type": "string"}},
    "X-Convtune-Config": {"description": "Its configuration.", "schema": {"type": "string"}},
    "X-Convtune-Time-Ms": {"description": "Its run time in milliseconds.",
                           "schema": {"type": "string"}},
    "X-Convtune-Device": {"description": "The device it ran on.", "schema": {"type": "string"}},
}


@router.post(
    "/convolve",
    response_class=Response,
    dependencies=[RequireToken, Running],
    responses={
        200: {
            "content": {"application/octet-stream": {}},
            "description": "The output tensor as .npy bytes.",
            "headers": _HEADERS,
        },
        **WRITE_RESPONSES,
        400: {"model": ErrorOut, "description": "A corrupt .npy upload."},
        409: {"model": ErrorOut, "description": "No usable algorithm for this problem."},
        413: {"model": ErrorOut, "description": "Upload or problem over the size limits."},
        422: {"model": ErrorOut, "description": "Wrong shapes, dtypes, fields or algorithm."},
        429: BUSY,
    },
)
def convolve(
    settings: SettingsDep,
    facade: ServiceDep,
    x: Annotated[UploadFile, File(description="Input (n, c, h, w) as .npy.")],
    w: Annotated[UploadFile, File(description="Filter (k, c/groups, r, s) as .npy.")],
    stride: Annotated[str, Form(max_length=40, description="S or 'SH,SW'.")] = "1",
    padding: Annotated[str, Form(max_length=40, description="P or 'PH,PW'.")] = "0",
    dilation: Annotated[str, Form(max_length=40, description="D or 'DH,DW'.")] = "1",
    groups: Annotated[int, Form(ge=1, le=MAX_CHANNELS)] = 1,
    algorithm: Annotated[str | None, Form(max_length=64)] = None,
    workspace_limit: Annotated[int | None, Form(ge=0, le=MAX_WORKSPACE)] = None,
    device: Annotated[str | None, Form(max_length=MAX_DEVICE_LEN)] = None,
) -> Response:
    """Convolve x with w where the server runs it; the output comes back as .npy bytes."""
    pads = parse_pair(padding, "padding")
    strides = parse_pair(stride, "stride")
    dilations = parse_pair(dilation, "dilation")
    # The form's pairs get the JSON schema's bounds (the service's policy), not only the
    # library's much wider ones.
    for name, values, most in (("padding", pads, MAX_PAD), ("stride", strides, MAX_STRIDE),
                               ("dilation", dilations, MAX_DILATION)):
        if max(values) > most:
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                                f"{name} must be at most {most}, got {max(values)}")
    xa, wa = load_npy(x, "x", settings), load_npy(w, "w", settings)
    if xa.dtype != wa.dtype:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            f"x is {xa.dtype.name} but w is {wa.dtype.name}: upload the same dtype",
        )
    dev = request_device(facade, device, settings)
    # load_npy bounds x and w; the output can still be over the limit, and far enough over
    # for the library's own bound to refuse it with a 422 first.
    plane = problem_for(
        (1, 1, *xa.shape[2:]), (1, 1, *wa.shape[2:]), stride=strides, padding=pads,
        dilation=dilations, dtype=xa.dtype.name,
    )
    check_tensor_sizes(xa.shape, wa.shape, plane, settings)
    problem = problem_for(
        xa.shape, wa.shape, stride=strides, padding=pads, dilation=dilations, groups=groups,
        dtype=xa.dtype.name,
    )
    enforce_limits(facade, problem, dev, workspace_limit, settings)
    runtime = get_runtime(dev)
    inputs: tuple[Any, Any] = (xa, wa)
    if dev != "cpu":  # uploads arrive on the host: copy them to the device
        inputs = (runtime.contiguous(xa, xa.dtype.name), runtime.contiguous(wa, wa.dtype.name))
    plan = facade.plan(problem, dev, workspace_limit, algorithm=algorithm)
    y, elapsed_ms = plan.timed(*inputs)
    out = io.BytesIO()
    np.save(out, runtime.to_numpy(y), allow_pickle=False)
    return Response(
        out.getvalue(),
        media_type="application/octet-stream",
        headers={
            "X-Convtune-Algorithm": plan.algorithm,
            "X-Convtune-Config": plan.config,
            "X-Convtune-Time-Ms": f"{elapsed_ms:.6f}",
            "X-Convtune-Device": plan.device,
        },
    )
