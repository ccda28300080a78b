"""A first check of a device, in seconds: does the whole path work before minutes of device
time go to tests and benchmarks? (`gpu_session.sh smoke` stops the call when it fails.)

In order, each on fresh random operands of a small problem, against the float64 reference:
- tune: every configuration of every algorithm measured and verified, into a fresh store
  (a configuration that fails is data: listed, not fatal; no usable one is fatal);
- plan: the pick's plan on the device's own arrays (CuPy, or NumPy on the CPU), `out` given;
- convolve: `convolve` on torch tensors gives a torch tensor back (torch installed);
- graph: the plan captured in a CUDA graph on a stream where it never ran (fft: after one
  run there), replayed on new inputs (GPU only);
- module: a converted two-layer model's forward pass and input gradient (torch installed).
Prints one line per check ("ok NAME s" or "FAIL NAME: why") and exits 1 if any failed.

    python3 benchmarks/gpu_smoke.py --device cuda [--db URL]
"""

from __future__ import annotations

import argparse
import collections
import copy
import functools
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from algorithms.problem import ConvProblem  # noqa: E402
from algorithms.reference import reference_conv, relative_error, tolerance  # noqa: E402

#: Small enough to tune every configuration in seconds, odd enough to leave tile edges.
PROBLEM = ConvProblem(n=2, c=8, h=13, w=11, k=16, r=3, s=3, pad=1)
#: The measuring budget per candidate, unless the environment sets one.
BUDGET_S = "0.01"


class Smoke:
    """The checks, in order, sharing one store and the pick."""

    def __init__(self, device: str, db: str) -> None:
        self.device, self.db = device, db
        self.gpu = device.startswith("cuda")
        self.rng = np.random.default_rng()
        self.pick: Any = None

    @functools.cached_property
    def runtime(self) -> Any:
        """The device's runtime, made at the first check that needs it (a device that is
        not usable then fails that check, not the script)."""
        from tuner.devices import get_runtime

        return get_runtime(self.device)

    def operands(self) -> tuple[Any, Any, np.ndarray]:
        """(x, w, the float64 reference) for PROBLEM: fresh float32 operands on the device."""
        x, w = (self.runtime.random(shape, PROBLEM.dtype, self.rng)
                for shape in (PROBLEM.input_shape, PROBLEM.filter_shape))
        return x, w, reference_conv(self.host(x), self.host(w), PROBLEM)

    def host(self, array: Any) -> np.ndarray:
        """A float64 host copy of a device array or a torch tensor."""
        found = array.cpu().numpy() if hasattr(array, "cpu") else self.runtime.to_numpy(array)
        return np.asarray(found, np.float64)

    def agrees(self, y: Any, ref: np.ndarray, what: str) -> None:
        """AssertionError naming `what` unless y matches ref within the pick's tolerance."""
        limit = tolerance(PROBLEM.dtype, self.pick.algorithm, PROBLEM.math)
        error = relative_error(self.host(y), ref)
        assert error <= limit, f"{what}: relative error {error:.3g} over {limit:g}"

    def tune(self) -> str:
        from tuner import find_algorithms
        from tuner.service import service

        ranked = find_algorithms(PROBLEM, self.device, db=self.db, mode="tune")
        usable = [r for r in ranked if r.usable]
        assert usable, "no usable algorithm: " + "; ".join(
            f"{r.algorithm}/{r.config} {r.status} {r.error or ''}".strip() for r in ranked)
        self.pick = usable[0]
        _, rows = service(self.db).results({}, limit=10_000)
        statuses = collections.Counter(row["status"] for row in rows)
        for row in rows:
            if row["status"] in ("failed", "wrong_result"):
                why = next(iter((row.get("error") or "").splitlines()), "")
                print(f"   {row['status']} {row['algorithm']}/{row['config']}: {why}")
        return (f"{len(rows)} configurations ({dict(statuses)}); picked "
                f"{self.pick.algorithm}/{self.pick.config} {self.pick.time_ms:.4f} ms")

    def plan(self) -> str:
        from tuner import plan

        chosen = plan(PROBLEM, self.device, db=self.db)
        x, w, ref = self.operands()
        y = self.runtime.empty(PROBLEM.output_shape, PROBLEM.dtype)
        y[...] = np.nan  # a plan that writes nothing fails, whatever the memory held
        for _ in range(2):  # the first call sets the stream's lane up, the second is direct
            chosen(x, w, out=y)
        self.agrees(y, ref, "plan")
        return f"{chosen.algorithm}/{chosen.config}"

    def convolve(self) -> str:
        import torch

        from tuner import convolve

        x, w, ref = self.operands()
        where = "cuda" if self.gpu else "cpu"
        tx, tw = (torch.from_numpy(self.host(a).astype(np.float32)).to(where) for a in (x, w))
        y = convolve(tx, tw, padding=1, device=self.device, db=self.db)
        assert isinstance(y, torch.Tensor), f"convolve gave {type(y).__name__}, not a tensor"
        self.agrees(y, ref, "convolve")
        return "torch in, torch out"

    def graph(self) -> str:
        import cupy

        from tuner import plan

        chosen = plan(PROBLEM, self.device, db=self.db)
        x, w, _ = self.operands()
        y = cupy.empty(PROBLEM.output_shape, np.float32)
        cupy.cuda.Device().synchronize()
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            if chosen.algorithm == "fft":  # its cuFFT plans cannot be made in a capture
                chosen(x, w, out=y)
            stream.begin_capture()
            try:
                chosen(x, w, out=y)
            finally:
                graph = stream.end_capture()
            x2, w2, ref = self.operands()
            x[...], w[...] = x2, w2
            graph.launch(stream)
            stream.synchronize()
        self.agrees(y, ref, "graph replay")
        return "captured on a new stream, replayed on new inputs"

    def module(self) -> str:
        import torch

        from tuner.nn import convert

        where = "cuda" if self.gpu else "cpu"
        allowed = torch.backends.cudnn.allow_tf32
        torch.backends.cudnn.allow_tf32 = False  # FP32-accurate math, as the reference
        try:
            model = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(),
                                        torch.nn.Conv2d(16, 4, 1, stride=2)).to(where)
            reference = copy.deepcopy(model).double()
            convert(model, db=self.db)
            x = torch.randn(2, 8, 13, 11, device=where, requires_grad=True)
            x64 = x.detach().double().requires_grad_()
            y, y64 = model(x), reference(x64)
            y.sum().backward()
            y64.sum().backward()
        finally:
            torch.backends.cudnn.allow_tf32 = allowed
        torch.testing.assert_close(y.double(), y64, rtol=1e-4, atol=1e-4)
        assert x.grad is not None and x64.grad is not None
        torch.testing.assert_close(x.grad.double(), x64.grad, rtol=1e-4, atol=1e-4)
        return "forward and input gradient"


def _has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def run_checks(smoke: Smoke, out: Callable[[str], None] = print) -> list[str]:
    """Run every check that applies; the names of those that failed."""
    checks: list[tuple[str, Callable[[], str]]] = [("tune", smoke.tune), ("plan", smoke.plan)]
    if _has_torch():
        checks.append(("convolve", smoke.convolve))
    if smoke.gpu:
        checks.append(("graph", smoke.graph))
    if _has_torch():
        checks.append(("module", smoke.module))
    failed = []
    for name, check in checks:
        began = time.perf_counter()
        try:
            said = check()
        except Exception as error:  # a check's failure is its line, then the next check
            failed.append(name)
            last = traceback.extract_tb(error.__traceback__)[-1]
            why = (str(error).splitlines() or [type(error).__name__])[0]
            out(f"FAIL {name}: {type(error).__name__}: {why} "
                f"({Path(last.filename).name}:{last.lineno})")
            if name == "tune":  # nothing to plan without a pick
                break
            continue
        out(f"ok {name} {time.perf_counter() - began:.1f} s: {said}")
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    parser.add_argument("--db", help="a store's URL (default: a fresh SQLite file)")
    args = parser.parse_args(argv)
    os.environ.setdefault("CONVTUNE_BUDGET_S", BUDGET_S)
    with tempfile.TemporaryDirectory() as folder:
        db = args.db or f"sqlite:///{folder}/smoke.db"
        failed = run_checks(Smoke(args.device, db))
    print(f"smoke: {'FAILED ' + ', '.join(failed) if failed else 'all passed'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
