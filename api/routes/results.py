"""GET /v1/results: the stored measurements, filtered and paginated."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from api.deps import ServiceDep
from api.schemas import READ_RESPONSES, ResultsPage

router = APIRouter(prefix="/v1", tags=["results"])

_Int = Annotated[int | None, Field(default=None, ge=0, le=2**31 - 1)]
_Text = Annotated[str | None, Field(default=None, max_length=128)]


class ResultsQuery(BaseModel):
    """Filters (all optional, combined with AND) and the page."""

    model_config = ConfigDict(extra="forbid")

    device: _Text = Field(default=None, description="Fingerprint, or a prefix of one.")
    algorithm: _Text = None
    status: _Text = None
    config: _Text = None
    n: _Int = None
    c: _Int = None
    h: _Int = None
    w: _Int = None
    k: _Int = None
    r: _Int = None
    s: _Int = None
    pad_h: _Int = None
    pad_w: _Int = None
    stride_h: _Int = None
    stride_w: _Int = None
    dilation_h: _Int = None
    dilation_w: _Int = None
    groups: _Int = None
    dtype: _Text = None
    math: Literal["fp32", "tf32"] | None = None
    direction: Literal["forward", "backward_data", "backward_filter"] | None = None
    limit: int = Field(default=100, ge=1, le=1000)
    offset: int = Field(default=0, ge=0, le=2**31 - 1)


@router.get("/results", response_model=ResultsPage, responses=READ_RESPONSES)
def results(query: Annotated[ResultsQuery, Query()], facade: ServiceDep) -> dict[str, Any]:
    """Stored measurements joined with their problem and device, newest first."""
    filters = query.model_dump(exclude={"limit", "offset"}, exclude_none=True)
    total, page = facade.results(filters, limit=query.limit, offset=query.offset)
    return {"total": total, "limit": query.limit, "offset": query.offset, "items": page}
