"""Request and response models: the OpenAPI schema of the service."""

from __future__ import annotations

from dataclasses import MISSING, fields
from datetime import datetime
from typing import Annotated, Any, Literal, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, Strict, create_model

from algorithms.problem import LIMITS, ConvProblem
from tuner.networks import NETWORKS
from tuner.results import AlgorithmResult
from tuner.service import MeasurementRow

#: Schema bounds: the service's policy inside the library's outer bounds (LIMITS, which
#: ConvProblem enforces for every front end): generous for real networks, tight enough
#: that a request cannot ask for an hour of FFT on a padding of 60,000. Settings (max
#: tensor elements, FLOPs, device memory) bound the product of the dimensions.
MAX_BATCH = min(4096, LIMITS["n"])
MAX_CHANNELS = min(65536, LIMITS["c"])
MAX_SPATIAL = min(16384, LIMITS["h"])
MAX_FILTER = min(64, LIMITS["r"])
MAX_PAD = min(1024, LIMITS["pad"])
MAX_STRIDE = min(64, LIMITS["stride"])
MAX_DILATION = min(64, LIMITS["dilation"])
MAX_WORKSPACE = 2**62
MAX_DEVICE_LEN = 32

StrictInt = Annotated[int, Strict()]


def _dim(le: int, doc: str) -> Any:
    return Field(ge=1, le=le, description=doc)


_Pad = Annotated[int, Strict(), Field(ge=0, le=MAX_PAD)]
_Stride = Annotated[int, Strict(), Field(ge=1, le=MAX_STRIDE)]
_Dilation = Annotated[int, Strict(), Field(ge=1, le=MAX_DILATION)]
PadValue = _Pad | Annotated[list[_Pad], Field(min_length=2, max_length=2)]
StrideValue = _Stride | Annotated[list[_Stride], Field(min_length=2, max_length=2)]
DilationValue = _Dilation | Annotated[list[_Dilation], Field(min_length=2, max_length=2)]
Device = Annotated[
    str,
    Field(
        max_length=MAX_DEVICE_LEN,
        description="'cpu', 'cuda' or 'cuda:N' (default: the server's device).",
        examples=["cpu"],
    ),
]
WorkspaceLimit = Annotated[
    int,
    Strict(),
    Field(ge=0, le=MAX_WORKSPACE, description="Bytes of workspace allowed (0: none)."),
]
#: Find modes (tuner.modes.MODES): add, never rename.
Mode = Literal["auto", "cached", "tune", "exhaustive", "fast", "heuristic"]


class ProblemIn(BaseModel):
    """One forward convolution: input (n, c, h, w), filter (k, c/groups, r, s)."""

    model_config = ConfigDict(extra="forbid")

    n: Annotated[StrictInt, _dim(MAX_BATCH, "Batch size.")]
    c: Annotated[StrictInt, _dim(MAX_CHANNELS, "Input channels.")]
    h: Annotated[StrictInt, _dim(MAX_SPATIAL, "Input height.")]
    w: Annotated[StrictInt, _dim(MAX_SPATIAL, "Input width.")]
    k: Annotated[StrictInt, _dim(MAX_CHANNELS, "Output channels.")]
    r: Annotated[StrictInt, _dim(MAX_FILTER, "Filter height.")]
    s: Annotated[StrictInt, _dim(MAX_FILTER, "Filter width.")]
    pad: PadValue = Field(default=0, description="Padding: an int or [h, w].")
    stride: StrideValue = Field(default=1, description="Stride: an int or [h, w].")
    dilation: DilationValue = Field(default=1, description="Dilation: an int or [h, w].")
    groups: Annotated[StrictInt, _dim(MAX_CHANNELS, "Groups (divides c and k).")] = 1
    dtype: Literal["float16", "float32", "float64", "bfloat16"] = "float32"
    math: Literal["fp32", "tf32"] = Field(
        default="fp32",
        description="fp32: FP32-accurate; tf32: TF32 tensor cores allowed (float32 only).",
    )
    direction: Literal["forward", "backward_data", "backward_filter"] = Field(
        default="forward",
        description="What is computed: y from (x, w), dx from (dy, w) or dw from (x, dy).",
    )

    def to_problem(self) -> ConvProblem:
        """The library's ConvProblem (ValueError names the field that is wrong)."""
        return ConvProblem(
            n=self.n, c=self.c, h=self.h, w=self.w, k=self.k, r=self.r, s=self.s,
            pad=self.pad, stride=self.stride, dilation=self.dilation,  # type: ignore[arg-type]
            groups=self.groups, dtype=self.dtype, math=self.math, direction=self.direction,
        )


class FindRequest(BaseModel):
    """POST /v1/find."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{
                "problem": {"n": 1, "c": 8, "h": 16, "w": 16, "k": 8, "r": 3, "s": 3, "pad": 1},
                "device": "cpu", "mode": "auto",
            }]
        },
    )

    problem: ProblemIn
    device: Device | None = None
    workspace_limit: WorkspaceLimit | None = None
    mode: Mode = Field(
        default="auto",
        description="cached: only the database (404 if unknown); tune: measure now; "
                    "auto: cached, else tune; exhaustive: the same as auto; fast: the "
                    "database, else measure only the cost model's predicted top k and "
                    "the best of its top k algorithms "
                    "(the rest come back unmeasured, source 'not measured'); heuristic: "
                    "never measure, the database else the model's prediction (source "
                    "'predicted', with a confidence; 404 if nothing to predict from).",
    )


def fields_of(value_type: type, /, **descriptions: str) -> type[BaseModel]:
    """A pydantic model with the fields of the dataclass `value_type`, so the wire format
    cannot drift from the value type (datetimes travel as ISO-8601 strings)."""
    hints = get_type_hints(value_type)
    spec: dict[str, Any] = {}
    for f in fields(value_type):
        hint = hints[f.name]
        hint = str if hint is datetime else (str | None if hint == datetime | None else hint)
        default = ... if f.default is MISSING else f.default
        spec[f.name] = (hint, Field(default=default, description=descriptions.get(f.name)))
    return create_model(f"{value_type.__name__}Fields", **spec)


class AlgorithmResultOut(fields_of(  # type: ignore[misc]
    AlgorithmResult,
    status="ok, unsupported, over_workspace_limit, failed, wrong_result",
    source="fresh (measured by this call), measured here (stored, this device), "
    "not measured, or from a cached lookup elsewhere: same model, same architecture, "
    "predicted (by the cost model, else scaled from the nearest measured problem)",
    device="Fingerprint of the device measured on.",
    note="Where a predicted answer came from, or why a candidate was not measured.",
    confidence="A cost model's prediction only: the share of its ensemble that puts this "
    "candidate within 10% of the fastest (for the first, about the chance that it is).",
)):
    """One candidate's answer (the fields of tuner.AlgorithmResult)."""


class FindResponse(BaseModel):
    """The ranked candidates (fastest usable first) and the best one.

    `best` is null when no candidate is usable (all unsupported, failed, wrong or over
    the workspace limit): that is an answer, not an error, so the status is 200.
    """

    problem: dict[str, Any] = Field(description="The canonical problem key.")
    device: str
    best: AlgorithmResultOut | None
    candidates: list[AlgorithmResultOut]


class ResultItem(fields_of(MeasurementRow)):  # type: ignore[misc]
    """One stored measurement (the fields of a stored row) with its problem and device."""

    device: str
    device_name: str
    problem: dict[str, Any]


class ResultsPage(BaseModel):
    """A page of stored measurements, newest first."""

    total: int
    limit: int
    offset: int
    items: list[ResultItem]


class DeviceHere(BaseModel):
    """A device this server can run on."""

    device: str
    fingerprint: str
    info: dict[str, Any]


class CudaStatus(BaseModel):
    """Whether a CUDA GPU is usable here, and why not."""

    available: bool
    reason: str


class DevicesResponse(BaseModel):
    """Devices here and devices the database holds measurements for."""

    default: str
    here: list[DeviceHere]
    cuda: CudaStatus
    database: list[dict[str, Any]]


class AlgorithmsResponse(BaseModel):
    """Every registered algorithm name with the backends implementing it."""

    algorithms: dict[str, list[str]]
    backend_errors: dict[str, str]


class Health(BaseModel):
    """Liveness, and whether the server's own device can run work."""

    status: Literal["ok", "unavailable"]
    device: str
    reason: str | None = None


JobState = Literal["queued", "running", "done", "failed"]


class JobRequest(BaseModel):
    """POST /v1/jobs: a built-in network at some batch sizes, or a list of problems."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"network": "resnet50", "batches": [1, 8], "device": "cpu"},
                {"problems": [{"n": 1, "c": 8, "h": 16, "w": 16, "k": 8, "r": 3, "s": 3}]},
            ]
        },
    )

    network: Annotated[str, Field(max_length=64)] | None = Field(
        default=None,
        description=f"A built-in network, one of {', '.join(NETWORKS)} (with `batches`).",
    )
    batches: Annotated[
        list[Annotated[int, Strict(), Field(ge=1, le=MAX_BATCH)]],
        Field(min_length=1, max_length=16),
    ] = Field(default=[1], description="Batch sizes for `network`.")
    dtype: Literal["float16", "float32", "float64", "bfloat16"] = "float32"
    math: Literal["fp32", "tf32"] = Field(
        default="fp32", description="Arithmetic of `network`'s problems (tf32: float32 only)."
    )
    # No length of its own: the body's size limit bounds the parse, and the route answers
    # CONVTUNE_MAX_JOB_PROBLEMS with a 413 (a fixed 1000 here refused any higher setting
    # with a 422; a review of concurrency, 2026-11-30).
    problems: list[ProblemIn] | None = None
    device: Device | None = None
    workspace_limit: WorkspaceLimit | None = None


class JobProblemResult(BaseModel):
    """One problem of a job: its best result once tuned."""

    problem: dict[str, Any]
    describe: str
    layer: str | None = None
    batch: int | None = None
    state: Literal["pending", "done", "failed"]
    best: AlgorithmResultOut | None = None
    error: str | None = None


class JobProgress(BaseModel):
    """How far a job is."""

    done: int
    total: int


class JobOut(BaseModel):
    """A tuning job's state."""

    id: str
    state: JobState
    device: str
    progress: JobProgress
    created_at: str
    started_at: str | None
    finished_at: str | None
    error: str | None
    results: list[JobProblemResult]


class ErrorOut(BaseModel):
    """Every error: a message naming what was wrong."""

    detail: Any


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorOut, "description": description}


#: What any /v1 route may answer besides its own statuses: the read token (checked before
#: the route, in api.app's middleware) and a store the server cannot use.
READ_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: _error("Missing or wrong bearer token (when the server sets $CONVTUNE_READ_TOKEN)."),
    503: _error("The server's store is unusable or unreachable."),
}
#: ... and what any POST may: a body that cannot be read or is too large, and a read-only
#: store asked to measure or write. Routes add their own (and their own wording) over these.
WRITE_RESPONSES: dict[int | str, dict[str, Any]] = {
    **READ_RESPONSES,
    400: _error("A body that cannot be parsed (JSON that is not UTF-8, a corrupt upload)."),
    401: _error("Missing or wrong bearer token."),
    403: _error("A measurement or write asked of a read-only store."),
    413: _error("A body over $CONVTUNE_MAX_BODY_BYTES, or a problem over the size limits."),
}
#: A route that measures or convolves, when $CONVTUNE_MAX_RUNNING such requests already run
#: in the server process (api.admission; Retry-After says when to come back).
BUSY: dict[str, Any] = _error("As many finds that may measure, and convolutions, as "
                              "$CONVTUNE_MAX_RUNNING already run: retry later, or submit a job.")
