"""The CPU runtime: NumPy buffers, wall-clock timing, a processor/BLAS fingerprint."""

from __future__ import annotations

import os
import platform
import sys
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np

from algorithms.cpu.gemm import gemms_switch, torch_gemms
from algorithms.problem import ConvProblem
from algorithms.reference import reference
from algorithms.reference_gemm import errors
from algorithms.runtime import (
    Prepared,
    Timing,
    TimingPolicy,
    cpus_allowed,
    is_torch,
    time_runs,
    warm_until_stable,
)

#: The longest the CPU warm-up spins (a governor lifts the clock within tens of ms).
WARM_UP_S = 0.05
#: Runs shorter than this are primed before a sample that follows other work. Unprimed,
#: the tuner timed direct at 0.99-1.10x im2col_gemm on ResNet-50 b8 res5.1x1b (5 ms runs),
#: where alone it ran at 1.04-1.17x, below in six rounds of six (primed: 1.03-1.14x;
#: benchmarks/prime_effect.py, AMD EPYC, 2026-11-27). A run of 100 ms or more streams far
#: more data than the caches hold, so what the previous candidate left there cannot weigh
#: much (an estimate, not a measurement: this machine's noise hides such a share).
PRIME_BELOW_MS = 100.0


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo (empty where there is none)."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    if fields:
                        break  # the first processor's block is enough
                    continue
                name, _, value = line.partition(":")
                fields.setdefault(name.strip(), value.strip())
    except OSError:
        pass
    return fields


#: cgroup v2's CPU bandwidth limit of this process's group.
CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
#: cgroup v1's (quota and period in microseconds, a quota of -1 unlimited).
CFS_DIR = Path("/sys/fs/cgroup/cpu")


def _cpu_quota() -> float | None:
    """CPUs' worth of time the cgroup grants (quota / period: cgroup v2's cpu.max, else v1's
    cpu.cfs_quota_us and cpu.cfs_period_us), None when unlimited or unknown: `docker --cpus
    2` or a Kubernetes limit leaves the affinity mask at every core, so pods of 2 and 16 CPUs
    on one node type shared stored times."""
    try:
        quota, period = CPU_MAX.read_text().split()[:2]
    except (OSError, ValueError):
        try:
            quota = (CFS_DIR / "cpu.cfs_quota_us").read_text().strip()
            period = (CFS_DIR / "cpu.cfs_period_us").read_text().strip()
        except OSError:
            return None
    try:
        return None if quota in ("max", "-1") else round(int(quota) / int(period), 2)
    except (ValueError, ZeroDivisionError):
        return None


def _processor_model(info: dict[str, str]) -> str:
    return info.get("model name") or platform.processor() or platform.machine()


#: Instruction-set extensions that decide which kernels NumPy's BLAS and oneDNN run.
_ISA_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni",
              "amx_tile", "amx_bf16", "amx_int8", "asimd", "asimdhp", "sve", "sve2", "bf16",
              "i8mm")


def _processor_id(info: dict[str, str]) -> str:
    """Which processor model this is, beyond its name: a hypervisor names an EPYC Milan and
    a Genoa (AVX-512) both "AMD EPYC", and /proc/cpuinfo on aarch64 names none (Graviton 2
    and 3 were one device; a review of keys and fingerprints, 2026-11-30). x86: vendor,
    family, model, stepping; ARM: implementer, part, variant, revision; then the ISA
    extensions of _ISA_FLAGS it has."""
    ids = [info.get(k, "") for k in ("vendor_id", "cpu family", "model", "stepping")]
    if not any(ids):
        ids = [info.get(k, "") for k in ("CPU implementer", "CPU part", "CPU variant",
                                         "CPU revision")]
    flags = set((info.get("flags") or info.get("Features") or "").split())
    return " ".join([*ids, *(f for f in _ISA_FLAGS if f in flags)]).strip()


def _blas_threads() -> int:
    """Threads the loaded BLAS will use ($OPENBLAS_NUM_THREADS and friends included)."""
    from threadpoolctl import threadpool_info

    counts = [int(i.get("num_threads") or 0) for i in threadpool_info()
              if i.get("user_api") == "blas"]
    return max(counts, default=1)


def _blas_name() -> str:
    try:
        config = np.show_config(mode="dicts")  # type: ignore[call-arg]
        blas = config["Build Dependencies"]["blas"]
        return f"{blas.get('name', '?')} {blas.get('version', '?')}"
    except Exception:
        return "unknown"


#: Each thread's scratch (CpuRuntime.scratch): `.buffer`, a 1-D uint8 array, and
#: `.needed_at`, when a call last needed a quarter of it or more (time.monotonic()).
_SCRATCH = threading.local()
#: Seconds without a call needing a quarter of a thread's scratch after which it is cut.
SHRINK_AFTER_S = 60.0


class CpuRuntime:
    """The host processor as a tuning device."""

    backend = "cpu"
    device = "cpu"
    last_host_ms: float | None = None  # a sample is the host's work itself
    #: One workspace per thread for all of its plans. With a workspace of its own, each
    #: plan of a converted ResNet-50 (b1, Intel Xeon, 2 cores) found it evicted from the
    #: caches by the other layers by the time its layer came round again: the
    #: convolutions took 9-11 ms more in the model's order than each alone, mostly at the
    #: first layer of each shape (BENCHMARKS.md, "One workspace per thread on the CPU").
    #: Shared, the next layer finds it where the last one left it. The work of one thread
    #: runs one plan at a time, so no two runs overlap in it.
    shares_scratch = True
    captures = False
    max_operand_elements: int | None = None  # NumPy indexes in 64 bits
    #: Whether work for torch tensors runs its GEMMs on torch's threads (caller_stream).
    routes_gemms = True

    def __init__(self) -> None:
        # $CONVTUNE_CPU_TORCH_GEMM, read once: os.environ.get of an unset variable raises
        # and catches a KeyError inside, microseconds on every plan call for torch tensors.
        self.routes_gemms = gemms_switch()

    def empty(self, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        """An uninitialised C-contiguous array."""
        return np.empty(shape, dtype=dtype)

    def workspace(self, nbytes: int) -> np.ndarray | None:
        """A 1-D uint8 workspace of `nbytes` (None for 0)."""
        return np.empty(nbytes, dtype=np.uint8) if nbytes else None

    def scratch(self, nbytes: int) -> np.ndarray:
        """The first `nbytes` of the calling thread's scratch, grown to the largest need
        so far (a larger buffer replaces it: views handed out before keep the old one), and
        cut to the need once no call has needed a quarter of it for SHRINK_AFTER_S: one
        large call kept its buffer for the thread's life (each of a server's worker threads
        its own largest; a review of resource lifetimes, 2026-11-30), where a model's
        largest layer, met at every pass, keeps it (by time, not by calls: a deep model's
        pass of 300 small calls cut and grew it again at every pass)."""
        buffer: np.ndarray | None = getattr(_SCRATCH, "buffer", None)
        if buffer is None or buffer.size < nbytes:
            buffer = _SCRATCH.buffer = np.empty(nbytes, dtype=np.uint8)
            _SCRATCH.needed_at = time.monotonic()
        elif 4 * nbytes >= buffer.size:
            _SCRATCH.needed_at = time.monotonic()
        elif time.monotonic() - _SCRATCH.needed_at > SHRINK_AFTER_S:
            buffer = _SCRATCH.buffer = np.empty(nbytes, dtype=np.uint8)
            _SCRATCH.needed_at = time.monotonic()
        return buffer[:nbytes]

    def random(self, shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> np.ndarray:
        """Fresh standard-normal values (never zeros: zeros time and verify optimistically)."""
        return rng.standard_normal(shape, dtype=np.float64).astype(dtype)

    def to_numpy(self, array: Any, dtype: str | None = None) -> np.ndarray:
        """The array as NumPy (no copy when it already is)."""
        return np.asarray(array)

    def storage_dtype(self, dtype: str) -> str:
        """NumPy holds every problem dtype (bfloat16 through ml_dtypes)."""
        return dtype

    def adopt(self, array: Any) -> np.ndarray | None:
        """The caller's array as NumPy when it lives on the host, else None."""
        if isinstance(array, np.ndarray):
            return array
        if hasattr(array, "__cuda_array_interface__"):
            return None
        try:
            return np.asarray(array)
        except (TypeError, ValueError):
            return None

    def ready(self, x: Any, w: Any, out: Any, shapes: tuple[tuple[int, ...], ...],
              storage: str) -> tuple[Hashable, Any, Any, Any] | None:
        """None: on the host the checked path's few microseconds are nothing beside the
        work, and it routes torch tensors' GEMMs (caller_stream)."""
        return None

    def output(self, x: Any, shape: tuple[int, ...], storage: str) -> Any | None:
        """None: with no direct path here, the checked path allocates."""
        return None

    def contiguous(self, array: Any, dtype: str) -> np.ndarray:
        """C-contiguous in `dtype`; a no-op when it already is."""
        return np.ascontiguousarray(array, dtype=dtype)

    def synchronize(self) -> None:
        """Nothing to wait for on the host."""

    def fault(self) -> str | None:
        """The host never loses its ability to run work."""
        return None

    def activate(self) -> AbstractContextManager[None]:
        """Nothing to select on the host."""
        return nullcontext()

    def lane(self) -> Hashable:
        """The calling thread: CPU work runs where it is called."""
        return threading.get_ident()

    def capturing(self, lane: Hashable) -> bool:
        """Never: the host has no CUDA graphs."""
        return False

    def caller_stream(self, array: Any) -> AbstractContextManager[None]:
        """The host has no streams, but a torch tensor's caller has torch's threads: the
        work's GEMMs run on them (algorithms.cpu.gemm), not against them."""
        if self.routes_gemms and is_torch(array):
            return torch_gemms(sys.modules["torch"])
        return nullcontext()

    def elapsed_ms(self, fn: Callable[[], None]) -> float:
        """Wall time of one call."""
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3

    def sample_ms(self, fn: Callable[[], None], runs: int) -> float:
        """Wall time of `runs` back-to-back calls, per call."""
        start = time.perf_counter()
        for _ in range(runs):
            fn()
        return (time.perf_counter() - start) * 1e3 / runs

    def prime(self, fn: Callable[[], None], last_ms: float) -> None:
        """One untimed run of a short `fn`: the caches then hold its data, not the previous
        candidate's, which otherwise decided close calls between candidates interleaved."""
        if last_ms < PRIME_BELOW_MS:
            fn()

    def time(self, fn: Callable[[], None], policy: TimingPolicy) -> Timing:
        """Warm up, then time samples until the budget, max_reps or the race cutoff."""
        return time_runs(self.sample_ms, fn, policy)

    def warm_up(self) -> None:
        """A short BLAS spin, so a frequency governor has raised the clock before timing."""
        a = np.ones((128, 128), dtype=np.float32)

        def spin() -> None:
            np.matmul(a, a)

        warm_until_stable(lambda: self.sample_ms(spin, 4), WARM_UP_S)

    def prepare(self, problem: ConvProblem, candidates: Iterable[tuple[Any, str]]
                ) -> Prepared:
        """Nothing: the CPU algorithms build nothing before their first run."""
        return Prepared()

    def reference(self, a: Any, b: Any, problem: ConvProblem) -> np.ndarray:
        """The NumPy float64 reference (algorithms.reference)."""
        return reference(np.asarray(a), np.asarray(b), problem)

    def compare(self, out: Any, ref: Any, dtype: str) -> tuple[float, float]:
        """(max abs error, relative error) in float64 on the host."""
        return errors(np, np.asarray(out), ref, dtype)

    def fingerprint(self) -> dict[str, Any]:
        """What the timings are valid for: processor, cores, NumPy and BLAS versions."""
        info = _cpuinfo()
        return {
            "kind": "cpu",
            "name": _processor_model(info),
            "model_id": _processor_id(info),
            "arch": platform.machine(),
            "units": os.cpu_count() or 1,
            # Timings taken with 1 BLAS thread or 2 allowed cores are not valid for 16.
            "blas_threads": _blas_threads(),
            "cpus_allowed": cpus_allowed(),
            "cpu_quota": _cpu_quota(),
            "memory_bytes": self.memory_bytes(),
            "numpy": np.__version__,
            "blas": _blas_name(),
            # Major and minor only: a patch release changes no NumPy or BLAS code, and
            # split every host's results from the fleet's at each upgrade.
            "python": ".".join(platform.python_version_tuple()[:2]),
        }

    def memory_bytes(self) -> int | None:
        """Physical memory, where the OS says."""
        try:
            return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        except (ValueError, OSError, AttributeError):
            return None
