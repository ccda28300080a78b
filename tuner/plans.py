"""Plans: a tuned choice bound to one problem on one device, run with no lookup.

A `Plan` holds the chosen algorithm and configuration, the implementation, and its
workspace. Calling it checks the arrays (shapes, dtype, device: attribute reads only),
enqueues the algorithm on the caller's current stream and returns: nothing is looked up,
nothing is synchronised, and nothing is allocated when `out` is given. That makes a plan
safe to capture in a CUDA graph once it has run on the capturing stream. A plan that ran
inside a capture is kept for the life of the process (its workspaces are the graph's now),
so a graph captured through `convolve` or the torch module outlives the plan caches.

A call whose arrays the runtime finds ready as they are (`Runtime.ready`: on a GPU, plain
C-contiguous arrays of the plan's shapes and dtype on the current device and stream) runs on
them directly; any other goes the checked way, which adopts, converts, switches the device
and stream, or names what is wrong. CONVTUNE_FAST_PLAN_CALL=0, read when a plan is made,
sends every call the checked way (as does `Plan(..., direct=False)`).

Workspaces are per lane (a thread on the CPU, a stream on a GPU), so that threads or
streams running the same plan at once never share scratch memory. On a GPU each plan keeps
its own per stream, the creating stream's allocated with the plan and another's on its
first call. On the CPU every plan of a thread runs in that thread's one scratch
(`Runtime.shares_scratch`), which the next layer of a model then finds in the caches.
Arrays come back in the caller's kind: NumPy for NumPy, CuPy for CuPy, torch for torch.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Hashable, Iterable
from typing import Any

from algorithms.base import Algorithm
from algorithms.problem import ConvProblem
from algorithms.runtime import Runtime, is_torch, is_torch_type, overlaps
from tuner.results import AlgorithmResult

#: Set to "0", plans made afterwards take every call the checked way (for comparisons).
FAST_CALL_ENV = "CONVTUNE_FAST_PLAN_CALL"

#: Plans that ran inside a CUDA graph capture, kept for good (Plan._keep_for_graphs).
_captured: list[Plan] = []
_captured_lock = threading.Lock()


def dtype_name(array: Any) -> str:
    """The dtype of a NumPy, CuPy or torch array as a problem dtype name ("float32")."""
    dtype = getattr(array, "dtype", "")
    try:
        return _dtype_names(dtype)
    except TypeError:  # an unhashable dtype-like: name it the slow way
        return str(dtype).removeprefix("torch.")


@functools.lru_cache(maxsize=64)
def _dtype_names(dtype: Any) -> str:
    # str() of a NumPy dtype walks Python code (numpy._core._dtype): a few microseconds,
    # three times per plan call, so each dtype is named once.
    return str(dtype).removeprefix("torch.")


def untracked(array: Any) -> Any:
    """A torch tensor detached from autograd, as NumPy when on the CPU (no copy either way).

    Other arrays come back unchanged. A tensor that requires grad refuses both the array
    interfaces and `.numpy()`; the autograd wrapper (tuner.nn) records the graph instead.
    """
    if not is_torch(array):
        return array
    # detach() and device.type cost about a microsecond each, per operand and call.
    tensor = array.detach() if array.requires_grad else array
    if not tensor.is_cpu:
        # CuPy has no bfloat16: the GPU backend holds it as uint16 bits (storage_dtype).
        if dtype_name(tensor) == "bfloat16":
            import torch

            return tensor.view(torch.uint16)
        return tensor
    if dtype_name(tensor) == "bfloat16":  # NumPy knows bfloat16 only through ml_dtypes
        import torch

        return tensor.view(torch.int16).numpy().view("bfloat16")
    return tensor.numpy()


def _dense(array: Any) -> Any:
    """A strided torch CUDA tensor made C-contiguous by torch on its current stream (the
    caller's), from torch's allocator: a CUDA graph's own pool while capturing. Adopted as
    it is, CuPy would read `__cuda_array_interface__`, which synchronizes the producer's
    stream, and copy into its own pool, freed before a captured graph replays. Other
    arrays come back unchanged (`out` never comes here: a copy would not be the caller's)."""
    if is_torch(array) and array.is_cuda and not array.is_contiguous():
        return (array.detach() if array.requires_grad else array).contiguous()
    return array


def refuse_overlap(out: Any, operands: Iterable[tuple[str, Any]]) -> None:
    """ValueError naming the first (name, array) of `operands` that `out` shares memory
    with: an algorithm writes its output while still reading its operands."""
    for name, operand in operands:
        if overlaps(out, operand):
            raise ValueError(f"out overlaps {name} in memory; pass an out that shares no "
                             f"memory with the operands")


class Plan:
    """One problem's tuned algorithm on one device, ready to run: `plan(x, w, out=None)`."""

    def __init__(
        self, problem: ConvProblem, device: str, choice: AlgorithmResult,
        implementation: Algorithm, runtime: Runtime, direct: bool | None = None,
    ) -> None:
        self.problem = problem
        self.device = device
        #: The result this plan runs (algorithm, config, time, source).
        self.choice = choice
        self.algorithm = choice.algorithm
        self.config = choice.config
        self.workspace_bytes = implementation.workspace_bytes(problem, choice.config)
        self.implementation = implementation
        self._runtime = runtime
        # Properties of the problem, which would otherwise be computed on every call.
        self._shapes = problem.operand_shapes
        self._names = problem.operand_names
        self._dtypes = (problem.dtype, runtime.storage_dtype(problem.dtype))  # accepted
        self._workspaces: dict[Hashable, Any] = {}
        self._shares_scratch = runtime.shares_scratch
        self._lock = threading.Lock()
        # `direct` False (or the environment's "0" when None): every call the checked way.
        if direct is None:
            direct = os.environ.get(FAST_CALL_ENV, "1") != "0"
        self._ready = runtime.ready if direct else None
        # How the direct path runs where the implementation says (a GPU algorithm: its
        # calls replayed, algorithms.cuda._replay), else through `run`.
        runner = getattr(implementation, "direct_runner", None)
        self._direct_run = None if runner is None else runner(
            problem, choice.config, self.workspace)
        # Asked on calls until a run is seen inside a CUDA graph capture (_keep_for_graphs);
        # a plan without a workspace holds no memory a graph could use.
        self._watch = (runtime.capturing if runtime.captures and self.workspace_bytes
                       else None)
        with runtime.activate():
            self.workspace()  # the creating lane's, now rather than on the first call

    def __repr__(self) -> str:
        return (f"Plan({self.problem.describe()} on {self.device}: {self.algorithm}/"
                f"{self.config}, workspace {self.workspace_bytes} B)")

    def workspace(self, lane: Hashable = None) -> Any:
        """This lane's workspace (thread on the CPU, current stream on a GPU), or `lane`'s."""
        if not self.workspace_bytes:
            return None
        if self._shares_scratch:  # the calling thread's: lanes are threads there
            return self._runtime.scratch(self.workspace_bytes)
        if lane is None:
            lane = self._runtime.lane()
        found = self._workspaces.get(lane)
        if found is None:
            with self._lock:
                found = self._workspaces.get(lane)
                if found is None:
                    found = self._workspaces[lane] = self._runtime.workspace(
                        self.workspace_bytes
                    )
        return found

    def _keep_for_graphs(self) -> None:
        """Keep this plan, and with it its workspaces and replays, for the life of the
        process: a CUDA graph captured one of its runs and replays it at those addresses
        whenever launched, also after whoever held the plan let it go (the Service drops
        plans on a re-tune, on another process's better result, beyond MAX_PLANS), when
        freed workspaces would be handed to other arrays."""
        with _captured_lock:
            if self._watch is not None:
                _captured.append(self)
                self._watch = None

    def _adopt(self, array: Any, what: str, shape: tuple[int, ...]) -> Any:
        # Not an array at all (None, a list): the host runtime's np.asarray would take it and
        # the message name its shape () or its dtype float64, not what the caller passed.
        adopted = self._runtime.adopt(untracked(array)) if hasattr(array, "dtype") else None
        if adopted is None:
            raise ValueError(f"{what} must be an array on {self.device}, got "
                             f"{type(array).__name__}")
        if tuple(adopted.shape) != shape:
            raise ValueError(f"{what} has shape {tuple(adopted.shape)}; this plan needs {shape}")
        held = dtype_name(adopted)
        if held not in self._dtypes:
            raise ValueError(f"{what} is {held}; this plan needs {self.problem.dtype}")
        return adopted

    def __call__(self, x: Any, w: Any, out: Any = None) -> Any:
        """y = conv(x, w) into `out` (or a new array), enqueued on the caller's stream.

        For the backward directions the operands are (dy, w) -> dx and (x, dy) -> dw.

        Returns `out` itself when given, else a new array of the caller's kind.
        """
        return self.enqueue(x, w, self.output(x, out))

    def output(self, x: Any, out: Any) -> Any:
        """`out`; else a new result beside `x`: a tensor from torch's allocator for a torch
        `x`, and with the direct path on, the runtime's array for its own kind of `x`
        (`Runtime.output`); else None (the checked path allocates)."""
        if out is not None:
            return out
        if is_torch_type(type(x)):
            # The sizes as separate ints: torch parses a tuple argument the slow way
            # (bench_host_path's allocation step, CPU tensors, torch 2.13: 4.4 -> 3.5 us).
            return x.new_empty(*self._shapes[2])
        if self._ready is not None:
            return self._runtime.output(x, self._shapes[2], self._dtypes[1])
        return None

    def enqueue(self, x: Any, w: Any, out: Any = None) -> Any:
        """Like calling the plan, but without `out` returns the backend's array (NumPy or
        CuPy), not the caller's kind."""
        ready = None if self._ready is None or out is None else self._ready(
            x, w, out, self._shapes, self._dtypes[1])
        if ready is not None:
            lane, xa, wa, ya = ready
            # Read once: another thread may stop the watch meanwhile. Lane 0, the legacy
            # default stream, is never captured: not even a call there.
            watch = self._watch
            if watch is not None and lane and watch(lane):
                self._keep_for_graphs()
            if self._direct_run is not None:
                self._direct_run(lane, xa, wa, ya)
            else:
                self.implementation.run(xa, wa, ya, self.workspace(lane), self.problem,
                                        self.config)
            return out
        problem = self.problem
        a_shape, b_shape, out_shape = self._shapes
        a_name, b_name, _ = self._names
        xa = self._adopt(_dense(x), a_name, a_shape)
        wa = self._adopt(_dense(w), b_name, b_shape)
        runtime = self._runtime
        if out is not None:
            ya = self._adopt(out, "out", out_shape)
            if not ya.flags.c_contiguous:
                raise ValueError("out must be C-contiguous")
            if not getattr(ya.flags, "writeable", True):
                raise ValueError("out is read-only; pass a writeable array")
            refuse_overlap(ya, ((a_name, xa), (b_name, wa)))
        with runtime.caller_stream(x):
            watch = self._watch  # as above
            lane = None if watch is None else runtime.lane()
            if watch is not None and lane and watch(lane):
                self._keep_for_graphs()
            if out is None:
                ya = runtime.empty(out_shape, problem.dtype)
            # Algorithms read C-contiguous inputs: a strided view costs one copy here.
            xa = runtime.contiguous(xa, problem.dtype)
            wa = runtime.contiguous(wa, problem.dtype)
            self.implementation.run(xa, wa, ya, self.workspace(lane), problem, self.config)
        return ya if out is None else out

    def timed(self, x: Any, w: Any, out: Any = None) -> tuple[Any, float]:
        """Run once and wait for it: (backend array, milliseconds the work took)."""
        result: list[Any] = []
        with self._runtime.caller_stream(x):
            elapsed = self._runtime.elapsed_ms(lambda: result.append(self.enqueue(x, w, out)))
        return result[0], elapsed
