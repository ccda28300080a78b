"""Depthwise convolution on the CPU: groups == c, one filter plane per output channel.

Supports every dtype (float16 and bfloat16 are converted to float32 while they are copied
into the padded planes, and accumulated in float32) with any kernel size, stride, padding,
dilation and channel multiplier m = k / c, in every direction.

Output channel c*m + j reads input channel c only, so each filter tap (r, s) is one
broadcast multiply-add over whole planes. To make that multiply-add run over long
contiguous rows rather than short strided ones, every plane is zero-padded and flattened:
with the padded row width wp a multiple of the column stride, output (p, q) reads flat
element (p*wq + q)*stride_w + offset(r, s), where wq = stride_h*wp/stride_w and
offset(r, s) = r*dil_h*wp + s*dil_w. So the "wide" output, oh rows of wq columns (the first
ow real, the rest harmless garbage), is for each tap one strided 1-D slice of the plane:

- forward:          y_wide[:, c, j] += w[c, j, r, s] * x_pad[:, c, offset + wide*sw]
- backward_data:    dx_pad[:, c, offset + wide*sw] += w[c, j, r, s] * dy_wide[:, c, j]
                    (dy_wide zero in its garbage columns, so they add nothing)
- backward_filter:  dw[c, j, r, s] = sum over images and wide of dy_wide[:, c, j] *
                    x_pad[:, c, offset + wide*sw]

Images go in chunks of at most CHUNK_BYTES of buffers (one image at least).

Workspace (E: compute element size, 4 for 16-bit storage; cn: images per chunk; P: flat
padded plane, about (h + 2*pad_h)*wp; V: wide output, oh*wq):
    align(cn*c*P*E) padded planes
  + forward: 2 x align(cn*c*V*E), accumulator and tap product
  + backward_data: align(cn*c*m*V*E) wide dy + align(cn*c*V*E) tap product
  + backward_filter: align(cn*c*m*V*E) wide dy + align(k*r*s*E) the filter accumulator
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from algorithms.base import Support, depthwise_limits
from algorithms.cpu._common import CpuAlgorithm, WorkspaceLayout, compute_dtype
from algorithms.problem import ConvProblem

#: Largest total of one chunk's buffers: a few MB keeps each tap's pass inside L2/L3.
CHUNK_BYTES = 4 << 20


@dataclass(frozen=True)
class _Planes:
    """The padded, flattened plane layout of one problem (module docstring)."""

    hp: int  # padded rows
    wp: int  # padded row width, a multiple of the column stride
    wq: int  # wide output row width (ow of them real)
    plane: int  # elements per flat padded plane: every tap's slice stays inside
    wide: int  # elements of a wide output plane: oh * wq
    taps: tuple[tuple[int, int, int], ...]  # (r, s, flat offset) of every tap

    def window(self, planes: np.ndarray, offset: int, stride: int) -> np.ndarray:
        """The strided slice of `planes` (..., plane) one tap reads or writes (a view)."""
        return planes[..., offset:offset + (self.wide - 1) * stride + 1:stride]


@dataclass(frozen=True)
class _Plan:
    """One problem's plane layout, chunking and workspace."""

    planes: _Planes
    images: int  # images per chunk
    per_image: int  # bytes of buffers per image
    layout: WorkspaceLayout


def _planes(problem: ConvProblem) -> _Planes:
    (ph, pw), (sh, sw), (dh, dw) = problem.pad, problem.stride, problem.dilation
    oh, _ow = problem.out_hw
    hp = problem.h + 2 * ph
    wp = -(-(problem.w + 2 * pw) // sw) * sw
    wq = sh * wp // sw
    taps = tuple((r, s, r * dh * wp + s * dw) for r in range(problem.r) for s in range(problem.s))
    # The last tap's slice reaches past the padded rows only in garbage columns: zeros.
    plane = max(hp * wp, taps[-1][2] + (oh * wq - 1) * sw + 1)
    return _Planes(hp, wp, wq, plane, oh * wq, taps)


def _plan(problem: ConvProblem) -> _Plan:
    planes = _planes(problem)
    dtype = compute_dtype(problem)
    c, m = problem.c, problem.k // problem.c
    per_image = {"pad": c * planes.plane}
    if problem.direction == "forward":
        per_image |= {"acc": c * planes.wide, "tap": c * planes.wide}
    else:
        per_image |= {"dy": c * m * planes.wide}
        if problem.direction == "backward_data":
            per_image["tap"] = c * planes.wide
    nbytes = sum(per_image.values()) * dtype.itemsize
    images = max(1, min(problem.n, CHUNK_BYTES // nbytes))
    layout = WorkspaceLayout()
    for name, count in per_image.items():
        layout.add(name, (images, count), dtype)
    if problem.direction == "backward_filter":
        layout.add("dw", (c, m, problem.r, problem.s), dtype)
    return _Plan(planes, images, nbytes, layout)


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
        self.geo = plan.planes
        self.c, self.m = problem.c, problem.k // problem.c
        self.sw = problem.stride[1]
        # Padding and garbage columns are never written below: zero them once per run.
        for name in ("pad", "dy"):
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
        for part in chunks:
            if p.direction == "forward":
                self._forward(a[part], w, out.reshape(y_shape)[part])
            else:
                self._backward_data(a.reshape(y_shape)[part], w, out[part])

    # --- moves between tensors and the flat buffers --------------------------------------
    def _padded(self, cn: int) -> np.ndarray:
        return self.buf["pad"][:cn].reshape(cn, self.c, self.geo.plane)

    def _interior(self, padded: np.ndarray) -> np.ndarray:
        """The image inside padded planes (cn, c, plane), as (cn, c, h, w) (a view)."""
        p, geo = self.problem, self.geo
        grid = padded[:, :, :geo.hp * geo.wp].reshape(*padded.shape[:2], geo.hp, geo.wp)
        return grid[:, :, p.pad[0]:p.pad[0] + p.h, p.pad[1]:p.pad[1] + p.w]

    def _real(self, wide: np.ndarray) -> np.ndarray:
        """The ow real columns of wide planes (..., wide), as (..., oh, ow) (a view)."""
        oh, ow = self.problem.out_hw
        return wide.reshape(*wide.shape[:-1], oh, self.geo.wq)[..., :ow]

    def _load_x(self, x: np.ndarray) -> np.ndarray:
        padded = self._padded(x.shape[0])
        self._interior(padded)[...] = x  # converts 16-bit storage to the compute dtype
        return padded

    def _load_dy(self, dy: np.ndarray) -> np.ndarray:
        cn, geo = dy.shape[0], self.geo
        wide = self.buf["dy"][:cn].reshape(cn, self.c, self.m, geo.wide)
        self._real(wide)[...] = dy  # garbage columns stay the zeros of __init__
        return wide

    def _tap(self, cn: int) -> np.ndarray:
        return self.buf["tap"][:cn].reshape(cn, self.c, self.geo.wide)

    # --- the three directions on one chunk -----------------------------------------------
    def _forward(self, x: np.ndarray, w: np.ndarray, y: np.ndarray) -> None:
        cn, geo = x.shape[0], self.geo
        padded = self._load_x(x)
        acc = self.buf["acc"][:cn].reshape(cn, self.c, geo.wide)
        tap = self._tap(cn)
        for j in range(self.m):
            for i, (r, s, offset) in enumerate(geo.taps):
                weights = w[None, :, j, r, s, None]
                # The first tap writes the accumulator, so it needs no zeroing.
                np.multiply(geo.window(padded, offset, self.sw), weights,
                            out=tap if i else acc)
                if i:
                    acc += tap
            y[:, :, j] = self._real(acc)  # rounds to 16-bit storage where it applies

    def _backward_data(self, dy: np.ndarray, w: np.ndarray, dx: np.ndarray) -> None:
        cn, geo = dy.shape[0], self.geo
        wide = self._load_dy(dy)
        padded = self._padded(cn)
        padded.fill(0)  # accumulated into; its padding gathers what falls outside the image
        tap = self._tap(cn)
        for r, s, offset in geo.taps:
            target = geo.window(padded, offset, self.sw)
            for j in range(self.m):
                np.multiply(wide[:, :, j], w[None, :, j, r, s, None], out=tap)
                target += tap
        dx[...] = self._interior(padded)

    def _backward_filter(self, x: np.ndarray, dy: np.ndarray) -> None:
        geo = self.geo
        padded, wide = self._load_x(x), self._load_dy(dy)
        dw = self.buf["dw"]
        for r, s, offset in geo.taps:
            window = geo.window(padded, offset, self.sw)
            for j in range(self.m):
                # Garbage columns of dy are zero: the sum covers exactly the real outputs.
                dw[:, j, r, s] += np.einsum("ncv,ncv->c", wide[:, :, j], window)
