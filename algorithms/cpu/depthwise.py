"""Depthwise convolution on the CPU: groups == c, one filter plane per output channel.

Supports every dtype (float16 and bfloat16 are converted to float32, contiguously, and
accumulated in float32) with any kernel size, stride, padding, dilation and channel
multiplier m = k / c, in every direction.

Output channel c*m + j reads input channel c only, so each filter tap (r, s) is one
broadcast multiply-add over whole planes. To make that multiply-add run over long
contiguous rows rather than short strided ones, each zero-padded input plane is split into
stride_h * stride_w phases (rows a, a + sh, ...; columns b, b + sw, ...) and each phase is
flattened with rows of wq = ceil(padded width / sw) elements. Input row p*sh + r*dh is row
p + r*dh // sh of phase r*dh % sh (likewise for columns), so with the "wide" output, oh rows
of wq columns (the first ow real, the rest harmless garbage), every tap is one contiguous
1-D slice of one phase, at offset (r*dh // sh)*wq + s*dw // sw:

- forward:          y_wide[:, c, j] += w[c, j, r, s] * x_phase[:, c, slice]
- backward_data:    dx_phase[:, c, slice] += w[c, j, r, s] * dy_wide[:, c, j]
                    (dy_wide is zero in its garbage columns, so they add nothing)
- backward_filter:  dw[c, j, r, s] = sum over images and wide of dy_wide[:, c, j] * slice

Images go in chunks of at most CHUNK_BYTES of buffers (one image at least).

Workspace (E: compute element size, 4 for 16-bit storage; cn: images per chunk; F: one flat
phase, about ceil((h + 2*pad_h)/sh) * wq plus the reach of the last tap; V: wide output,
oh*wq), each buffer aligned:
    cn*c*sh*sw*F*E  phases
  + forward: 2 x cn*c*V*E (accumulator, tap product)
  + backward_data: cn*c*m*V*E wide dy + cn*c*V*E tap product
  + backward_filter: cn*c*m*V*E wide dy + k*r*s*E filter accumulator
  + 16-bit storage: cn*c*max(h*w, m*oh*ow)*4 contiguous float32 staging
    (forward and backward_data: + k*r*s*4, the filter in float32)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from algorithms.base import Support, WorkspaceLayout, depthwise_limits
from algorithms.cpu._common import CpuAlgorithm, compute_dtype
from algorithms.problem import ConvProblem

#: Largest total of one chunk's buffers: a few MB keeps each tap's pass inside L2/L3.
CHUNK_BYTES = 4 << 20


@dataclass(frozen=True)
class _Tap:
    """Where one filter tap reads: its phase and the offset of its slice in that phase."""

    r: int
    s: int
    phase: int
    offset: int


@dataclass(frozen=True)
class _Phases:
    """The phase layout of one problem (module docstring)."""

    hq: int  # rows of a phase: ceil(padded height / sh)
    wq: int  # columns of a phase, and of a wide output row (ow of them real)
    flat: int  # elements per flat phase: every tap's slice stays inside
    wide: int  # elements of a wide output plane: oh * wq
    taps: tuple[_Tap, ...]


@dataclass(frozen=True)
class _Plan:
    """One problem's phase layout, chunking and workspace."""

    phases: _Phases
    images: int  # images per chunk
    per_image: int  # bytes of buffers per image
    layout: WorkspaceLayout


def _phases(problem: ConvProblem) -> _Phases:
    (ph, pw), (sh, sw), (dh, dw) = problem.pad, problem.stride, problem.dilation
    hq = -(-(problem.h + 2 * ph) // sh)
    wq = -(-(problem.w + 2 * pw) // sw)
    taps = tuple(_Tap(r, s, (r * dh % sh) * sw + s * dw % sw, (r * dh // sh) * wq + s * dw // sw)
                 for r in range(problem.r) for s in range(problem.s))
    wide = problem.out_hw[0] * wq
    # Slices reach past the phase's rows only in garbage columns: zeros there.
    flat = max(hq * wq, max(t.offset for t in taps) + wide)
    return _Phases(hq, wq, flat, wide, taps)


def _plan(problem: ConvProblem) -> _Plan:
    phases = _phases(problem)
    dtype = compute_dtype(problem)
    c, m = problem.c, problem.k // problem.c
    oh, ow = problem.out_hw
    per_image = {"phases": c * problem.stride[0] * problem.stride[1] * phases.flat}
    if problem.direction == "forward":
        per_image |= {"acc": c * phases.wide, "tap": c * phases.wide}
    else:
        per_image["dy"] = c * m * phases.wide
        if problem.direction == "backward_data":
            per_image["tap"] = c * phases.wide
    if dtype != np.dtype(problem.dtype):
        per_image["stage"] = c * max(problem.h * problem.w, m * oh * ow)
    nbytes = sum(per_image.values()) * dtype.itemsize
    images = max(1, min(problem.n, CHUNK_BYTES // nbytes))
    layout = WorkspaceLayout()
    for name, count in per_image.items():
        layout.add(name, (images, count), dtype)
    if problem.direction == "backward_filter":
        layout.add("dw", (c, m, problem.r, problem.s), dtype)
    elif "stage" in per_image:  # the filter in float32: a 16-bit ufunc operand casts slowly
        layout.add("w", (c, m, problem.r, problem.s), dtype)
    return _Plan(phases, images, nbytes, layout)


def _head(buffer: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A contiguous `shape` view of the start of a buffer (a short last chunk included)."""
    return buffer.reshape(-1)[: int(np.prod(shape))].reshape(shape)


class DepthwiseConv(CpuAlgorithm):
    """Depthwise (groups == c) convolution: per filter tap, one multiply-add over flat planes."""

    name: ClassVar[str] = "depthwise"
    directions: ClassVar[tuple[str, ...]] = ("forward", "backward_data", "backward_filter")

    def _limits(self, problem: ConvProblem) -> Support:
        return depthwise_limits(problem)

    def _workspace(self, problem: ConvProblem, config: str) -> int:
        """Padded planes and wide buffers of one chunk of images (module docstring)."""
        return _plan(problem).layout.nbytes

    def _run(
        self, a: np.ndarray, b: np.ndarray, out: np.ndarray, workspace: np.ndarray | None,
        problem: ConvProblem, config: str,
    ) -> None:
        """The problem's direction, chunk of images by chunk."""
        plan = _plan(problem)
        buf = plan.layout.views(workspace)
        _Chunks(problem, plan, buf).run(a, b, out)


class _Chunks:
    """One run: the workspace's buffers and the moves between them and the tensors."""

    def __init__(self, problem: ConvProblem, plan: _Plan, buf: dict[str, np.ndarray]) -> None:
        self.problem, self.plan, self.buf = problem, plan, buf
        self.geo = plan.phases
        self.c, self.m = problem.c, problem.k // problem.c
        # Padding, slack and garbage columns are never written below: zero them once.
        for name in ("phases", "dy"):
            if name in buf:
                buf[name].fill(0)

    def run(self, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        """Every chunk of images in the problem's direction."""
        p = self.problem
        y_shape = (p.n, self.c, self.m, *p.out_hw)  # channel c*m + j is [:, c, j]
        chunks = [slice(n0, n0 + self.plan.images) for n0 in range(0, p.n, self.plan.images)]
        if p.direction == "backward_filter":
            dw = self.buf["dw"]
            dw.fill(0)
            for part in chunks:
                self._backward_filter(a[part], b.reshape(y_shape)[part])
            out.reshape(dw.shape)[...] = dw  # rounds to 16-bit storage where it applies
            return
        w = b.reshape(self.c, self.m, p.r, p.s)
        if "w" in self.buf:
            w = self.buf["w"]
            w[...] = b.reshape(w.shape)
        for part in chunks:
            if p.direction == "forward":
                self._forward(a[part], w, out.reshape(y_shape)[part])
            else:
                self._backward_data(a.reshape(y_shape)[part], w, out[part])

    # --- moves between tensors and the flat buffers --------------------------------------
    def _staged(self, array: np.ndarray) -> np.ndarray:
        """`array` in the compute dtype: itself, or a contiguous float32 copy (16-bit)."""
        if "stage" not in self.buf:
            return array
        stage = _head(self.buf["stage"], array.shape)
        stage[...] = array  # contiguous to contiguous: NumPy's strided 16-bit casts are slow
        return stage

    def _store(self, dst: np.ndarray, src: np.ndarray) -> None:
        """dst[...] = src, through contiguous float32 staging for 16-bit storage."""
        dst[...] = self._staged(src) if "stage" in self.buf else src

    def _phase_views(self, cn: int) -> list[tuple[np.ndarray, tuple[slice, slice]]]:
        """Each phase's part inside the image, as a (cn, c, rows, cols) view of the phases,
        with the image's rows and columns it holds."""
        p, geo = self.problem, self.geo
        (ph, pw), (sh, sw) = p.pad, p.stride
        flat = _head(self.buf["phases"], (cn, self.c, sh * sw, geo.flat))
        grids = flat[..., :geo.hq * geo.wq].reshape(cn, self.c, sh * sw, geo.hq, geo.wq)
        views = []
        for a in range(sh):
            i0, i1 = -(-(ph - a) // sh), -(-(ph + p.h - a) // sh)  # phase rows in the image
            for b in range(sw):
                j0, j1 = -(-(pw - b) // sw), -(-(pw + p.w - b) // sw)
                if i1 > i0 and j1 > j0:
                    views.append((grids[:, :, a * sw + b, i0:i1, j0:j1],
                                  (slice(i0 * sh + a - ph, None, sh),
                                   slice(j0 * sw + b - pw, None, sw))))
        return views

    def _flat_phases(self, cn: int) -> np.ndarray:
        sh, sw = self.problem.stride
        return _head(self.buf["phases"], (cn, self.c, sh * sw, self.geo.flat))

    def _load_x(self, x: np.ndarray) -> np.ndarray:
        staged = self._staged(x)
        for view, (rows, cols) in self._phase_views(x.shape[0]):
            view[...] = staged[:, :, rows, cols]
        return self._flat_phases(x.shape[0])

    def _real(self, wide: np.ndarray) -> np.ndarray:
        """The ow real columns of wide planes (..., wide), as (..., oh, ow) (a view)."""
        oh, ow = self.problem.out_hw
        return wide.reshape(*wide.shape[:-1], oh, self.geo.wq)[..., :ow]

    def _load_dy(self, dy: np.ndarray) -> np.ndarray:
        cn = dy.shape[0]
        wide = _head(self.buf["dy"], (cn, self.c, self.m, self.geo.wide))
        self._real(wide)[...] = self._staged(dy)  # garbage columns stay the zeros of __init__
        return wide

    def _window(self, phases: np.ndarray, tap: _Tap) -> np.ndarray:
        return phases[:, :, tap.phase, tap.offset:tap.offset + self.geo.wide]

    # --- the three directions on one chunk -----------------------------------------------
    def _forward(self, x: np.ndarray, w: np.ndarray, y: np.ndarray) -> None:
        cn, geo = x.shape[0], self.geo
        phases = self._load_x(x)
        acc = _head(self.buf["acc"], (cn, self.c, geo.wide))
        product = _head(self.buf["tap"], (cn, self.c, geo.wide))
        for j in range(self.m):
            for i, tap in enumerate(geo.taps):
                # The first tap writes the accumulator, so it needs no zeroing.
                np.multiply(self._window(phases, tap), w[None, :, j, tap.r, tap.s, None],
                            out=product if i else acc)
                if i:
                    acc += product
            self._store(y[:, :, j], self._real(acc))

    def _backward_data(self, dy: np.ndarray, w: np.ndarray, dx: np.ndarray) -> None:
        cn, geo = dy.shape[0], self.geo
        wide = self._load_dy(dy)
        phases = self._flat_phases(cn)
        phases.fill(0)  # accumulated into; the padding gathers what falls outside the image
        product = _head(self.buf["tap"], (cn, self.c, geo.wide))
        for tap in geo.taps:
            target = self._window(phases, tap)
            for j in range(self.m):
                np.multiply(wide[:, :, j], w[None, :, j, tap.r, tap.s, None], out=product)
                target += product
        # 16-bit storage: gather dx in float32 first, then convert it in one contiguous pass.
        whole = _head(self.buf["stage"], dx.shape) if "stage" in self.buf else dx
        for view, (rows, cols) in self._phase_views(cn):
            whole[:, :, rows, cols] = view
        if whole is not dx:
            dx[...] = whole

    def _backward_filter(self, x: np.ndarray, dy: np.ndarray) -> None:
        phases = self._load_x(x)
        wide = self._load_dy(dy)
        dw = self.buf["dw"]
        for tap in self.geo.taps:
            window = self._window(phases, tap)
            for j in range(self.m):
                # Garbage columns of dy are zero: the sum covers exactly the real outputs.
                dw[:, j, tap.r, tap.s] += np.einsum("ncv,ncv->c", wide[:, :, j], window)
