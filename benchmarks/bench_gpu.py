"""GPU benchmark: our four CUDA algorithms, our tuned choice and cuDNN, per network layer.

Run on a GPU machine, from the repository root:

    python benchmarks/bench_gpu.py --out bench_gpu.json

For ResNet-50 b32, VGG-16 b16, GoogLeNet b32 and MobileNet-v2 b32 (--networks) in the
precision asked for (--dtype float32/float16/bfloat16, --math fp32/tf32) it compiles every
kernel (first run of each configuration), checks every configuration against a float64
convolution on the GPU (PyTorch's float64 conv2d, or our im2col_gemm in float64 without
PyTorch), then times, with CUDA events and L2 flushed before each sample (CudaRuntime.time;
a sample of a run under 0.5 ms is several runs back to back, the later ones warm, alike on
both sides; TFLOP/s and GB/s of such layers are warm-cache rates):
- each algorithm at its best configuration,
- our tuned choice: the fastest correct (algorithm, config) measured here, or, with --tuner,
  the pick of the real tuner (tuner.api.find_best_algorithm, a throw-away database),
- PyTorch conv2d with cudnn.benchmark on, in the matching mode: TF32 off for math fp32
  (strict FP32, like ours), on for math tf32; the relative error of each side is reported
  next to its time,
--direction backward_data / backward_filter measures the gradients instead (dx from dy and w;
dw from x and dy), cuDNN's through torch.nn.grad.conv2d_input / conv2d_weight.
- for forward 3x3 layers, cupy.matmul FP32 on a GEMM of the same M (out channels), N (n*P*Q) and K
  (c*R*S) next to implicit_gemm.
Per layer: ms, TFLOP/s (direct-convolution FLOPs, problem.flops), ours/cuDNN speed ratio;
geometric means at the end. Our pick and cuDNN are timed once more in alternating rounds
(--head-to-head, A B B A ...), and their ms and the ratio are those rounds' medians (the
pick's time from selection, the least of many noisy medians, stays as `selection_ms`). The
times above are of runs back to back, as a network issues them: where a run takes longer to
enqueue than to run, they measure the host (our Python, or PyTorch's). So each algorithm's
best configuration and cuDNN are also timed on the device alone (CudaRuntime.device_ms: the
runs wait queued behind a spin), in a table of their own with the wall / device ratio of our
pick. Depthwise layers (groups == c) are memory-bound, so they get a table of their own in
effective GB/s (x, w and y once each, problem.buffer_bytes, over the time) against the HBM
copy rate (measured at the start by a device-to-device copy, or --hbm-gbps; about 3,000 GB/s
on an H100). JSON goes to --out after every layer (a cut-off run keeps what it measured); a
Markdown table is printed last.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from algorithms.cuda._loader import kernel_sources_hash  # noqa: E402
from algorithms.cuda.event_timing import runs_spanning  # noqa: E402
from algorithms.cuda.runtime import CudaRuntime, cuda_available  # noqa: E402
from algorithms.problem import ConvProblem  # noqa: E402
from algorithms.reference import tolerance  # noqa: E402
from algorithms.reference_gemm import as_float64, errors, fill_nan  # noqa: E402
from algorithms.registry import algorithms_for, get_algorithm  # noqa: E402
from algorithms.runtime import TimingPolicy, random_operands  # noqa: E402
from benchmarks.bench_layers import layer_problems  # noqa: E402
from benchmarks.gpu_report import (  # noqa: E402
    HBM_COPY_GBPS,
    alternating,
    bandwidth,
    device_summary,
    fmt,
    markdown,
    summarize,
    write_json,
)
from tuner.candidates import Candidate  # noqa: E402
from tuner.measuring import candidate_run  # noqa: E402


def torch_conv(torch: Any, problem: ConvProblem, a: Any, b: Any) -> Any:
    """PyTorch's result of the problem's direction from its operands (a, b)."""
    geometry = (problem.stride, problem.pad, problem.dilation, problem.groups)
    if problem.direction == "backward_data":
        return torch.nn.grad.conv2d_input(problem.input_shape, b, a, *geometry)
    if problem.direction == "backward_filter":
        return torch.nn.grad.conv2d_weight(a, problem.filter_shape, b, *geometry)
    return torch.nn.functional.conv2d(a, b, None, *geometry)


def _tensor(torch: Any, array: Any, dtype: str) -> Any:
    """A torch view of a CuPy array holding `dtype` (bfloat16 bits as torch.bfloat16)."""
    tensor = torch.from_dlpack(array)
    return tensor.view(torch.bfloat16) if dtype == "bfloat16" else tensor


def _tflops(problem: ConvProblem, ms: float | None) -> float | None:
    return problem.flops / (ms * 1e-3) / 1e12 if ms else None


def _runner(rt: Any, algorithm: Any, x: Any, w: Any, y: Any, ws: Any, problem: ConvProblem,
            config: str) -> Callable[[], None]:
    """A no-argument call of one configuration as plans and the tuner make it (its calls
    replayed: tuner.measuring.candidate_run), binding the loop variables."""
    return candidate_run(rt, problem, Candidate(algorithm, config, 0, ""), (x, w, y), ws)


class DeviceLost(RuntimeError):
    """A configuration left the CUDA context unusable: `row` holds the layer so far, the
    culprit's error included, so that the report names it."""

    def __init__(self, row: dict[str, Any], fault: str) -> None:
        super().__init__(fault)
        self.row = row


class Bench:
    """Everything one layer needs: runtime, policy, optional torch, the oracle."""

    def __init__(self, args: argparse.Namespace) -> None:
        import cupy

        self.cupy = cupy
        self.args = args
        self.rt = CudaRuntime(0)
        self.policy = TimingPolicy(warmup=args.warmup, budget_s=args.budget,
                                   min_reps=args.min_reps, max_reps=args.max_reps)
        self.rng = np.random.default_rng(args.seed)
        self.torch: Any = None
        if not args.no_torch:
            try:
                import torch

                if torch.cuda.is_available():
                    torch.backends.cudnn.benchmark = True
                    # cuDNN in the mode our problems ask for: TF32 only for math tf32.
                    torch.backends.cudnn.allow_tf32 = args.math == "tf32"
                    torch.backends.cuda.matmul.allow_tf32 = args.math == "tf32"
                    self.torch = torch
            except ImportError:
                pass

    def time(self, fn: Callable[[], Any]) -> tuple[float, float]:
        """(median ms, spread ms) under the benchmark's policy."""
        timing = self.rt.time(fn, self.policy)
        return timing.median_ms, timing.spread_ms

    def device_time(self, fn: Callable[[], Any], ms: float) -> float | None:
        """`fn`'s device time per run, the host's enqueueing left out (CudaRuntime.device_ms:
        the runs wait queued behind a spin), in enough runs to span about a millisecond of
        the time measured with the host (`ms`); None if it cannot be had."""
        try:
            return self.rt.device_ms(fn, runs_spanning(ms))
        except Exception as exc:  # the report keeps the other numbers
            print(f"  device time failed ({type(exc).__name__}: {exc})", file=sys.stderr)
            return None

    def copy_gbps(self, nbytes: int = 1 << 30) -> float:
        """The device's copy rate in GB/s (bytes read and written over the median of 5
        device-to-device copies of `nbytes`, events around each), else HBM_COPY_GBPS."""
        cupy = self.cupy
        try:
            source = cupy.empty(nbytes, cupy.uint8)
            target = cupy.empty_like(source)
            times = []
            for _ in range(6):  # the first warms up
                start, end = cupy.cuda.Event(), cupy.cuda.Event()
                start.record()
                target[...] = source
                end.record()
                end.synchronize()
                times.append(cupy.cuda.get_elapsed_time(start, end))
            del source, target
            return 2 * nbytes / (sorted(times[1:])[2] * 1e-3) / 1e9
        except Exception as exc:  # out of memory: the H100's rate, said so
            print(f"  copy rate not measured ({type(exc).__name__}: {exc}); using "
                  f"{HBM_COPY_GBPS:.0f} GB/s", file=sys.stderr)
            return HBM_COPY_GBPS

    def reference(self, x: Any, w: Any, problem: ConvProblem) -> Any:
        """A float64 result on the GPU (PyTorch's, else the tuner's own: per-tap float64
        GEMMs, algorithms.reference_gemm)."""
        cupy = self.cupy
        if self.torch is not None:
            torch = self.torch
            # as_float64: bfloat16 arrays hold bits (uint16), which astype would take as
            # integers (a review of the benchmarks, 2026-11-30: the bfloat16 step compared
            # bit patterns throughout).
            xt = torch.from_dlpack(as_float64(cupy, x, problem.dtype))
            wt = torch.from_dlpack(as_float64(cupy, w, problem.dtype))
            return cupy.from_dlpack(torch_conv(torch, problem, xt, wt).contiguous())
        return self.rt.reference(x, w, problem)  # per-tap cuBLAS DGEMMs, any direction

    def rel_error(self, y: Any, ref: Any, dtype: str) -> float:
        """Relative error ||y - ref|| / ||ref|| in float64, on the GPU (`y` holding `dtype`:
        bfloat16 as its bits)."""
        return errors(self.cupy, y, ref, dtype)[1]

    def layer(self, network: str, name: str, problem: ConvProblem) -> dict[str, Any]:
        """Check and time everything on one layer."""
        cupy = self.cupy
        rt = self.rt
        # The direction's operands: (x, w) -> y, (dy, w) -> dx or (x, dy) -> dw.
        x, w, y = random_operands(rt, problem, self.rng)
        ref = self.reference(x, w, problem)
        row: dict[str, Any] = {
            "network": network, "layer": name, "problem": problem.key(),
            "describe": problem.describe(), "flops": problem.flops, "algorithms": {},
        }
        candidates: list[tuple[float, str, str, float]] = []
        for algorithm in algorithms_for("cuda"):
            entry: dict[str, Any] = {"configs": {}}
            support = algorithm.supports(problem)
            if not support:
                entry["unsupported"] = support.reason
                row["algorithms"][algorithm.name] = entry
                continue
            for config in algorithm.configs(problem):
                result: dict[str, Any] = {
                    "workspace_bytes": algorithm.workspace_bytes(problem, config)}
                try:
                    ws = rt.workspace(result["workspace_bytes"])
                    fill_nan(y)
                    t0 = time.perf_counter()
                    _runner(rt, algorithm, x, w, y, ws, problem, config)()  # compiles
                    rt.synchronize()
                    result["first_run_s"] = time.perf_counter() - t0
                    err = self.rel_error(y, ref, problem.dtype)
                    result["rel_error"] = err
                    if not err <= tolerance(problem.dtype, algorithm.name, problem.math):
                        result["status"] = "wrong"
                    else:
                        ms, spread = self.time(
                            _runner(rt, algorithm, x, w, y, ws, problem, config))
                        result.update(status="ok", ms=ms, spread_ms=spread,
                                      tflops=_tflops(problem, ms))
                        candidates.append((ms, algorithm.name, config, err))
                    del ws
                except Exception as exc:  # out of memory, launch failure: record, go on
                    result.update(status="error", error=f"{type(exc).__name__}: {exc}")
                    # Said as it happens: a fault that ends the process left no row naming
                    # its configuration (a review of the benchmarks, 2026-11-30).
                    print(f"  {name} {algorithm.name}/{config}: {result['error']}",
                          file=sys.stderr, flush=True)
                    fault = rt.fault()
                    if fault is not None:  # sticky: every later call would fail too
                        entry["configs"][config] = result
                        row["algorithms"][algorithm.name] = entry
                        row["fault"] = {"algorithm": algorithm.name, "config": config,
                                        "error": result["error"], "device": fault}
                        raise DeviceLost(row, fault) from None
                entry["configs"][config] = result
            timed = [(r["ms"], c) for c, r in entry["configs"].items() if r.get("ms")]
            if timed:
                ms, config = min(timed)
                entry.update(best_config=config, ms=ms, tflops=_tflops(problem, ms))
                ws = rt.workspace(algorithm.workspace_bytes(problem, config))
                entry["device_ms"] = self.device_time(
                    _runner(rt, algorithm, x, w, y, ws, problem, config), ms)
                del ws
            row["algorithms"][algorithm.name] = entry
            cupy.get_default_memory_pool().free_all_blocks()

        row["tuned"] = self.tuned(problem, candidates, x, w, y)
        row["cudnn"] = self.cudnn(problem, x, w, ref)
        if row["tuned"].get("ms") and row["cudnn"].get("ms"):
            if self.args.head_to_head:
                self.head_to_head(problem, row, x, w, y)
            row["speed_vs_cudnn"] = row["cudnn"]["ms"] / row["tuned"]["ms"]
        row["device"] = device_summary(row)
        if (problem.direction == "forward" and problem.r == 3 and problem.s == 3
                and problem.groups == 1 and problem.dtype == "float32"
                and problem.math == "fp32"):  # cupy.matmul is strict FP32: compared with that
            row["gemm"] = self.gemm(problem, row["algorithms"].get("implicit_gemm", {}))
        if problem.groups == problem.c:
            row["bandwidth"] = bandwidth(row, problem.buffer_bytes, self.args.hbm_gbps)
        return row  # the layer's buffers go back to the pool; the caller frees them

    def tuned(self, problem: ConvProblem, candidates: list[tuple[float, str, str, float]],
              x: Any, w: Any, y: Any) -> dict[str, Any]:
        """Our pick: the real tuner's (with --tuner) or the fastest correct one measured."""
        if self.args.tuner:
            try:
                from tuner.api import find_best_algorithm

                with tempfile.TemporaryDirectory() as tmp:
                    pick = find_best_algorithm(problem, "cuda:0", db=f"sqlite:///{tmp}/t.db",
                                               mode="tune")
                algorithm = get_algorithm("cuda", pick.algorithm)
                ws = self.rt.workspace(algorithm.workspace_bytes(problem, pick.config))
                ms, spread = self.time(
                    _runner(self.rt, algorithm, x, w, y, ws, problem, pick.config))
                return {"source": "tuner", "algorithm": pick.algorithm, "config": pick.config,
                        "ms": ms, "spread_ms": spread, "tflops": _tflops(problem, ms),
                        "tuner_ms": pick.time_ms, "rel_error": pick.rel_error}
            except Exception as exc:  # the tuner is not required for the numbers below
                print(f"  tuner failed ({type(exc).__name__}: {exc}); using the measured best",
                      file=sys.stderr)
        if not candidates:
            return {"source": "none"}
        ms, name, config, err = min(candidates)
        return {"source": "measured", "algorithm": name, "config": config, "ms": ms,
                "tflops": _tflops(problem, ms), "rel_error": err}

    def head_to_head(self, problem: ConvProblem, row: dict[str, Any], x: Any, w: Any,
                     y: Any) -> None:
        """Our pick and cuDNN timed again in alternating rounds (gpu_report.alternating):
        their medians become both sides' `ms`, which the ratio is taken from; the times
        from selection stay as `selection_ms`."""
        tuned, cudnn = row["tuned"], row["cudnn"]
        algorithm = get_algorithm("cuda", tuned["algorithm"])
        ws = self.rt.workspace(algorithm.workspace_bytes(problem, tuned["config"]))
        ours = _runner(self.rt, algorithm, x, w, y, ws, problem, tuned["config"])
        policy = TimingPolicy(warmup=1, budget_s=self.args.head_to_head_budget, min_reps=5,
                              max_reps=10)
        try:
            found = alternating(lambda call: self.rt.time(call, policy).median_ms, ours,
                                self._cudnn_call(problem, x, w), self.args.head_to_head)
        except Exception as exc:  # the ratio from selection stays, said so
            row["head_to_head"] = {"error": f"{type(exc).__name__}: {exc}"}
            return
        finally:
            del ws
        row["head_to_head"] = found
        for side, entry in (("ours", tuned), ("cudnn", cudnn)):
            entry["selection_ms"] = entry["ms"]
            entry["ms"] = found[f"{side}_ms"]
            entry["tflops"] = _tflops(problem, entry["ms"])

    def _cudnn_call(self, problem: ConvProblem, x: Any, w: Any) -> Callable[[], Any]:
        """A no-argument call of PyTorch's convolution of the direction on `x` and `w`."""
        torch = self.torch
        xt, wt = _tensor(torch, x, problem.dtype), _tensor(torch, w, problem.dtype)
        return lambda: torch_conv(torch, problem, xt, wt)

    def cudnn(self, problem: ConvProblem, x: Any, w: Any, ref: Any) -> dict[str, Any]:
        """PyTorch's convolution of the direction (cuDNN, benchmark mode, TF32 as `math` says)
        on the same buffers."""
        if self.torch is None:
            return {"skipped": "PyTorch with CUDA is not available"}
        conv = self._cudnn_call(problem, x, w)
        try:
            out = conv()
            self.torch.cuda.synchronize()
            err = self.rel_error(self.cupy.from_dlpack(out.float().contiguous()), ref,
                                 "float32")  # CuPy has no bfloat16: widened exactly
            ms, spread = self.time(conv)
        except Exception as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}
        return {"ms": ms, "spread_ms": spread, "tflops": _tflops(problem, ms), "rel_error": err,
                "device_ms": self.device_time(conv, ms)}

    def gemm(self, problem: ConvProblem, implicit: dict[str, Any]) -> dict[str, Any]:
        """cupy.matmul FP32 on the layer's GEMM shape, next to implicit_gemm's rate."""
        cupy = self.cupy
        out_h, out_w = problem.out_hw
        m, n, k = problem.k, problem.n * out_h * out_w, problem.c * problem.r * problem.s
        a = self.rt.random((m, k), "float32", self.rng)
        b = self.rt.random((k, n), "float32", self.rng)
        c = cupy.empty((m, n), cupy.float32)
        ms, _spread = self.time(lambda: cupy.matmul(a, b, out=c))
        rate = 2 * m * n * k / (ms * 1e-3) / 1e12
        ours = implicit.get("tflops")
        return {"m": m, "n": n, "k": k, "matmul_ms": ms, "matmul_tflops": rate,
                "implicit_gemm_tflops": ours,
                "implicit_vs_matmul": ours / rate if ours else None}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=Path("bench_gpu.json"))
    p.add_argument("--networks", default="resnet50:32,vgg16:16,googlenet:32,mobilenet_v2:32",
                   help="comma-separated network:batch pairs")
    p.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    p.add_argument("--math", default="fp32", choices=["fp32", "tf32"],
                   help="fp32: FP32-accurate on both sides; tf32: TF32 allowed on both")
    p.add_argument("--direction", default="forward",
                   choices=["forward", "backward_data", "backward_filter"])
    p.add_argument("--layers", type=int, default=0, help="only the first N layers of each")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--budget", type=float, default=0.1, help="seconds of timing per candidate")
    p.add_argument("--min-reps", type=int, default=5)
    p.add_argument("--max-reps", type=int, default=30)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-torch", action="store_true", help="skip cuDNN (PyTorch)")
    p.add_argument("--hbm-gbps", type=float, default=None,
                   help="the device's HBM copy rate, GB/s (depthwise layers are judged by "
                        "it); default: measured here by a 1 GiB device-to-device copy "
                        f"({HBM_COPY_GBPS:.0f} where it cannot be)")
    p.add_argument("--head-to-head", type=int, default=4, metavar="ROUNDS",
                   help="time our pick and cuDNN again in this many alternating rounds and "
                        "compare those (0: compare the times from selection)")
    p.add_argument("--head-to-head-budget", type=float, default=0.02,
                   help="seconds of timing per side in each round")
    p.add_argument("--tuner", action="store_true",
                   help="ask the real tuner for our pick (slower: it verifies on the host)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 2 when no GPU is usable."""
    args = parse_args(argv)
    ok, why = cuda_available()
    if not ok:
        print(f"no usable GPU: {why}", file=sys.stderr)
        return 2
    bench = Bench(args)
    bench.rt.warm_up()  # clocks out of idle before the first layer, whose side goes first
    if args.hbm_gbps is None:
        # The H100's 3,000 GB/s overstated every depthwise layer's share of an H200's
        # (about 4,300) by 1.4x (a review of the benchmarks, 2026-11-30).
        args.hbm_gbps = bench.copy_gbps()
    report: dict[str, Any] = {
        "device": bench.rt.fingerprint(), "kernel_sources_sha256": kernel_sources_hash(),
        "settings": {k: str(v) for k, v in vars(args).items()},
        "torch": getattr(bench.torch, "__version__", None), "rows": [], "summary": {},
    }
    started = time.perf_counter()
    for spec in args.networks.split(","):
        network, batch = spec.split(":")
        layers = layer_problems(network, int(batch), args.dtype, args.math, args.direction)
        if args.layers:
            layers = layers[: args.layers]
        for name, problem in layers:
            t0 = time.perf_counter()
            try:
                row = bench.layer(network, name, problem)
            except DeviceLost as lost:
                report["rows"].append(lost.row)
                write_json(report, args.out)
                print(f"{network}/{name}: {lost.row['fault']} left the device unusable; "
                      "stopping (rerun without it)", file=sys.stderr, flush=True)
                return 3
            bench.cupy.get_default_memory_pool().free_all_blocks()
            report["rows"].append(row)
            report["summary"] = summarize(report["rows"])
            report["elapsed_s"] = time.perf_counter() - started
            write_json(report, args.out)
            print(f"{network}/{name}: tuned {fmt(row['tuned'].get('ms'))} ms "
                  f"({row['tuned'].get('algorithm')}), cuDNN {fmt(row['cudnn'].get('ms'))} ms "
                  f"[{time.perf_counter() - t0:.1f} s]", file=sys.stderr, flush=True)
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
