"""Request and response models: the OpenAPI schema of the service."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict

from algorithms.problem import ConvProblem

#: Schema bounds: generous for real networks, tight enough that nothing absurd is accepted.
#: Settings (max tensor elements, FLOPs, device memory) bound the product of the dimensions.
MAX_BATCH = 4096
MAX_CHANNELS = 65536
MAX_SPATIAL = 16384
MAX_FILTER = 64
MAX_PAD = 1024
MAX_STRIDE = 64
MAX_DILATION = 64
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
Mode = Literal["auto", "cached", "tune"]


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
    dtype: Literal["float16", "float32", "float64"] = "float32"

    def to_problem(self) -> ConvProblem:
        """The library's ConvProblem (ValueError names the field that is wrong)."""
        return ConvProblem(
            n=self.n, c=self.c, h=self.h, w=self.w, k=self.k, r=self.r, s=self.s,
            pad=_pair(self.pad), stride=_pair(self.stride), dilation=_pair(self.dilation),
            groups=self.groups, dtype=self.dtype,
        )


def _pair(value: int | list[int]) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else (value[0], value[1])


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
                    "auto: cached, else tune.",
    )


class AlgorithmResultOut(BaseModel):
    """One candidate's answer (the fields of tuner.AlgorithmResult.as_dict())."""

    algorithm: str
    config: str
    status: str = Field(description="ok, unsupported, over_workspace_limit, failed, wrong_result")
    time_ms: float | None
    workspace_bytes: int
    max_error: float | None = None
    rel_error: float | None = None
    spread_ms: float | None = None
    reps: int = 0
    error: str | None = None
    source: str = Field(
        description="fresh (measured by this call), measured here (stored, this device), "
        "not measured, or from a cached lookup elsewhere: same model, same architecture, "
        "predicted (scaled from the nearest measured problem)"
    )
    device: str = Field(default="", description="Fingerprint of the device measured on.")
    measured_at: str | None = None
    note: str | None = Field(default=None, description="Where a predicted answer came from.")


class FindResponse(BaseModel):
    """The ranked candidates (fastest usable first) and the best one.

    `best` is null when no candidate is usable (all unsupported, failed, wrong or over
    the workspace limit): that is an answer, not an error, so the status is 200.
    """

    problem: dict[str, Any] = Field(description="The canonical problem key.")
    device: str
    best: AlgorithmResultOut | None
    candidates: list[AlgorithmResultOut]


class ResultItem(BaseModel):
    """One stored measurement with its problem and device."""

    device: str
    device_name: str
    problem: dict[str, Any]
    algorithm: str
    config: str
    impl_hash: str
    status: str
    time_ms: float | None
    spread_ms: float | None
    min_ms: float | None
    reps: int
    workspace_bytes: int
    max_error: float | None
    rel_error: float | None
    error: str | None
    measured_at: str
    tuner_version: str


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
    """Liveness."""

    status: Literal["ok"]


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
        default=None, description="resnet50, vgg16 or alexnet (with `batches`)."
    )
    batches: Annotated[
        list[Annotated[int, Strict(), Field(ge=1, le=MAX_BATCH)]],
        Field(min_length=1, max_length=16),
    ] = Field(default=[1], description="Batch sizes for `network`.")
    dtype: Literal["float16", "float32", "float64"] = "float32"
    problems: Annotated[list[ProblemIn], Field(max_length=1000)] | None = None
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
