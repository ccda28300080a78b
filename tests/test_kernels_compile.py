"""Every kernels/*.cu compiles with nvcc for sm_80 and sm_90, warning- and spill-free.

Instantiates exactly the template instances the Python side ships
(algorithms.cuda.shipped_kernels()), by taking each one's address in a generated file, and
reads ptxas's --resource-usage report. Runs only where `nvcc` is on PATH; object files only,
all compilations in parallel. Where CuPy can load NVRTC, the loader's own source text is
also compiled with NVRTC, as CuPy will on the GPU.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from algorithms.cuda import shipped_kernels
from algorithms.cuda._loader import COMPILE_OPTIONS, KERNELS_DIR, kernel_source

NVCC = shutil.which("nvcc")
ARCHS = ("sm_80", "sm_90")

needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")


def _instantiation_source(filename: str, names: tuple[str, ...]) -> str:
    keep = ",\n".join(f"    (void*)&{name}" for name in names)
    return f'#include "{filename}"\n\nvoid* convtune_keep[] = {{\n{keep}\n}};\n'


def _compile(src: Path, arch: str) -> subprocess.CompletedProcess[str]:
    assert NVCC is not None
    cmd = [
        NVCC, "-std=c++17", f"-arch={arch}", "-I", str(KERNELS_DIR),
        "-Werror", "all-warnings", "--resource-usage", "-c", str(src),
        "-o", str(src.with_suffix(f".{arch}.o")),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], str]:
    """(kernel file, arch) -> nvcc's combined output, compiled in parallel."""
    work = tmp_path_factory.mktemp("kernels")
    jobs: dict[tuple[str, str], Path] = {}
    for filename, names in shipped_kernels().items():
        src = work / f"keep_{Path(filename).stem}.cu"
        src.write_text(_instantiation_source(filename, names))
        for arch in ARCHS:
            jobs[(filename, arch)] = src
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {key: pool.submit(_compile, src, key[1]) for key, src in jobs.items()}
        results = {key: fut.result() for key, fut in futures.items()}
    out: dict[tuple[str, str], str] = {}
    for key, proc in results.items():
        text = proc.stdout + proc.stderr
        assert proc.returncode == 0, f"nvcc failed for {key}:\n{text}"
        out[key] = text
    return out


@needs_nvcc
def test_every_kernel_file_is_shipped() -> None:
    shipped = set(shipped_kernels())
    on_disk = {p.name for p in KERNELS_DIR.glob("*.cu")}
    assert on_disk == shipped, f"kernel files without a shipped instance: {on_disk - shipped}"


@needs_nvcc
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("filename", sorted(shipped_kernels()))
def test_compiles_without_warnings_or_spills(
    reports: dict[tuple[str, str], str], filename: str, arch: str
) -> None:
    text = reports[(filename, arch)]
    assert "warning" not in text.lower(), text
    entries = re.findall(r"Compiling entry function '(\w+)'", text)
    assert len(entries) == len(shipped_kernels()[filename]), text
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", text)
    assert len(spills) == len(entries), text
    assert all(s == ("0", "0") for s in spills), f"register spills in {filename} ({arch}):\n{text}"
    stacks = re.findall(r"(\d+) bytes stack frame", text)
    assert all(s == "0" for s in stacks), f"local memory in {filename} ({arch}):\n{text}"


def _nvrtc() -> object | None:
    try:
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
    except Exception:  # CuPy or libnvrtc missing: the nvcc checks above still run
        return None
    return nvrtc


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("filename", sorted(shipped_kernels()))
def test_loader_source_compiles_with_nvrtc(filename: str, arch: str) -> None:
    """The exact text the loader hands CuPy (header pasted in) compiles with NVRTC, silently."""
    nvrtc: Any = _nvrtc()
    if nvrtc is None:
        pytest.skip("NVRTC is not loadable (CuPy or libnvrtc missing)")
    names = shipped_kernels()[filename]
    prog = nvrtc.createProgram(kernel_source(filename), filename, (), ())
    try:
        for name in names:
            nvrtc.addNameExpression(prog, name)
        # The options CuPy's RawModule uses with ours: an explicit arch instead of the device's.
        options = (*COMPILE_OPTIONS, f"-arch={arch}", "--device-as-default-execution-space")
        try:
            nvrtc.compileProgram(prog, options)
        except Exception as exc:
            pytest.fail(f"NVRTC failed on {filename} ({arch}): {exc}\n{nvrtc.getProgramLog(prog)}")
        assert nvrtc.getProgramLog(prog).strip("\x00 \n") == ""
        assert all(nvrtc.getLoweredName(prog, name) for name in names)
    finally:
        nvrtc.destroyProgram(prog)
