"""The CPU fingerprint covers what changes CPU timings: BLAS threads and allowed CPUs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ("import json; from tuner.devices import identify; d = identify('cpu'); "
          "print(json.dumps({'fp': d.fingerprint, 'info': d.info}))")


def _identity(**env: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env}, check=True,
                          timeout=120)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_blas_thread_count_changes_the_fingerprint() -> None:
    # Issue 12 (10): OPENBLAS_NUM_THREADS=1 served timings taken with 2 threads as
    # "measured here": the fingerprint ignored the BLAS thread count.
    one = _identity(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    two = _identity(OPENBLAS_NUM_THREADS="2", OMP_NUM_THREADS="2", MKL_NUM_THREADS="2")
    assert one["info"]["blas_threads"] == 1  # type: ignore[index]
    assert two["info"]["blas_threads"] == 2  # type: ignore[index]
    assert one["fp"] != two["fp"]


@pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2
    or shutil.which("taskset") is None,
    reason="needs Linux, taskset and two allowed CPUs",
)
def test_cpu_affinity_changes_the_fingerprint() -> None:
    # Issue 12 (10): a process pinned to one core shared the fingerprint of an unpinned one.
    full = _identity()
    pinned = subprocess.run(
        ["taskset", "-c", "0", sys.executable, "-c", SCRIPT], capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True, timeout=120,
    )
    one = json.loads(pinned.stdout)
    assert one["info"]["cpus_allowed"] == 1 and full["info"]["cpus_allowed"] >= 2
    assert one["fp"] != full["fp"]


# Bug: a cgroup's CPU limit (docker --cpus 2, a Kubernetes limit) leaves the affinity mask at
# every core, so pods of 2 and 16 CPUs on one node type shared one fingerprint's times.
@pytest.mark.parametrize(("text", "quota"), [("200000 100000\n", 2.0), ("max 100000\n", None),
                                             ("150000 100000\n", 1.5)])
def test_a_cgroup_cpu_limit_is_in_the_fingerprint(
    text: str, quota: float | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from algorithms.cpu import runtime

    cpu_max = tmp_path / "cpu.max"
    cpu_max.write_text(text)
    monkeypatch.setattr(runtime, "CPU_MAX", cpu_max)
    assert runtime.CpuRuntime().fingerprint()["cpu_quota"] == quota
    monkeypatch.setattr(runtime, "CPU_MAX", tmp_path / "absent")  # no cgroup v2: unknown
    monkeypatch.setattr(runtime, "CFS_DIR", tmp_path / "absent")  # nor v1
    assert runtime.CpuRuntime().fingerprint()["cpu_quota"] is None


# Bug: only cgroup v2's cpu.max was read: a host on cgroup v1 (older kernels and Docker
# set-ups) had its containers' CPU limits left out of the fingerprint.
@pytest.mark.parametrize(("quota", "expected"), [("300000", 3.0), ("-1", None)])
def test_a_cgroup_v1_cpu_limit_is_in_the_fingerprint(
    quota: str, expected: float | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from algorithms.cpu import runtime

    (tmp_path / "cpu.cfs_quota_us").write_text(quota + "\n")
    (tmp_path / "cpu.cfs_period_us").write_text("100000\n")
    monkeypatch.setattr(runtime, "CPU_MAX", tmp_path / "absent")
    monkeypatch.setattr(runtime, "CFS_DIR", tmp_path)
    assert runtime.CpuRuntime().fingerprint()["cpu_quota"] == expected


# Bug: the patch version of Python split every host's results from the fleet's at each
# upgrade, though a patch release changes no NumPy or BLAS code.
def test_python_is_named_by_its_minor_version() -> None:
    import platform

    from algorithms.cpu.runtime import CpuRuntime

    assert CpuRuntime().fingerprint()["python"] == ".".join(platform.python_version_tuple()[:2])


# Mutation gap: every field that changes CPU timings is in the fingerprint, none dropped (a
# dropped one merges devices; an added one splits every store: both are pinned here), and
# the library versions are the ones loaded.
def test_the_cpu_fingerprint_has_every_field_and_the_library_versions() -> None:
    import numpy as np

    from algorithms.cpu import runtime

    info = runtime.CpuRuntime().fingerprint()
    assert set(info) == {"kind", "name", "model_id", "arch", "units", "blas_threads",
                         "cpus_allowed", "cpu_quota", "memory_bytes", "numpy", "blas",
                         "python"}
    assert info["numpy"] == np.__version__
    assert info["model_id"] == runtime._processor_id(runtime._cpuinfo())
    assert info["units"] == (os.cpu_count() or 1)
    blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]  # type: ignore[call-arg]
    assert info["blas"] == f"{blas['name']} {blas['version']}"


MILAN = {"vendor_id": "AuthenticAMD", "cpu family": "25", "model": "1", "stepping": "1",
         "model name": "AMD EPYC", "flags": "fpu sse avx avx2 fma"}
GENOA = {**MILAN, "model": "17", "flags": "fpu sse avx avx2 fma avx512f avx512_bf16"}
GRAVITON2 = {"CPU implementer": "0x41", "CPU part": "0xd0c", "CPU variant": "0x3",
             "CPU revision": "1", "Features": "fp asimd"}
GRAVITON3 = {**GRAVITON2, "CPU part": "0xd40", "CPU variant": "0x1",
             "Features": "fp asimd sve bf16 i8mm"}


# Mutation gap: the processor id names x86 vendor, family, model and stepping, or ARM's
# implementer, part, variant and revision, then its ISA extensions (AVX-512 on x86, SVE on
# ARM's "Features"): devices a hypervisor names alike get different ids.
def test_the_processor_id_tells_processors_of_one_name_apart() -> None:
    from algorithms.cpu.runtime import _processor_id, _processor_model

    assert _processor_id(MILAN) == "AuthenticAMD 25 1 1 avx avx2 fma"
    assert _processor_id(GENOA) == "AuthenticAMD 25 17 1 avx avx2 fma avx512f avx512_bf16"
    assert _processor_id({**MILAN, "stepping": "2"}) != _processor_id(MILAN)
    assert _processor_id({**GENOA, "model": "1"}) != _processor_id(MILAN)  # AVX-512 alone
    assert _processor_id(GRAVITON2) == "0x41 0xd0c 0x3 1 asimd"
    assert _processor_id(GRAVITON3) == "0x41 0xd40 0x1 1 asimd sve bf16 i8mm"
    assert _processor_model(MILAN) == "AMD EPYC"


# Mutation gap: a cgroup v2 period of 0 (a broken file) is "unknown", not a crash of every
# command that identifies the device.
def test_a_zero_cgroup_period_is_unknown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from algorithms.cpu import runtime

    (tmp_path / "cpu.max").write_text("200000 0\n")
    monkeypatch.setattr(runtime, "CPU_MAX", tmp_path / "cpu.max")
    assert runtime._cpu_quota() is None
