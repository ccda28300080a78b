"""Every kernels/*.cu compiles with nvcc for sm_80 and sm_90 (a file of wgmma for sm_90a
only: _loader.FEATURE_ARCH), warning- and spill-free.

Instantiates exactly the template instances the Python side ships
(algorithms.cuda.shipped_kernels()), by taking each one's address in a generated file, and
reads ptxas's --resource-usage report. Runs only where `nvcc` is on PATH; object files only,
all compilations in parallel. The loader's own source text is also compiled with NVRTC, as
CuPy will on the GPU: CuPy's where it loads, else the nvidia-cuda-nvrtc wheel's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from algorithms.cuda import shipped_kernels
from algorithms.cuda._loader import (
    KERNELS_DIR,
    NVRTC_OPTIONS,
    kernel_source,
    nvrtc_options,
    paste_headers,
)
from benchmarks.kernel_resources import NVCC, advisories, compile_all, compile_report, usages
from benchmarks.nvrtc_ctypes import load_nvrtc
from tests.cuda_emu.warp_cases import WARP_ARCH, WARP_INSTANCES, WARP_KERNELS

ARCHS = ("sm_80", "sm_90")

needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], str]:
    """(kernel file, arch) -> nvcc's combined output, compiled in parallel."""
    return compile_all(ARCHS, tmp_path_factory.mktemp("kernels"))


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
    found = usages(text)
    assert len(found) == len(shipped_kernels()[filename]), text
    spilled = [u.entry for u in found if u.spill_stores or u.spill_loads]
    assert not spilled, f"register spills in {filename} ({arch}): {spilled}\n{text}"
    stacked = [u.entry for u in found if u.stack_bytes]
    assert not stacked, f"local memory in {filename} ({arch}): {stacked}\n{text}"
    # A wgmma tile whose instructions ptxas serializes runs at a fraction of its speed, and
    # only a GPU run would show it: its note fails here first.
    assert not advisories(text), f"ptxas performance notes in {filename} ({arch}): {text}"


@needs_nvcc
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize(("filename", "kernel"), [("implicit_gemm_tc.cu", "implicit_gemm_tc_conv"),
                                                  ("implicit_gemm_wgmma.cu",
                                                   "implicit_gemm_wgmma_conv"),
                                                  ("implicit_gemm_wgmma.cu",
                                                   "implicit_gemm_wgmma_ws")])
def test_tensor_core_kernels_keep_their_stages_in_dynamic_shared_memory(
    reports: dict[tuple[str, str], str], filename: str, kernel: str, arch: str
) -> None:
    """ptxas allocates them no static shared memory: the launch's shared_mem (smem_bytes) is
    all a block has (the warp-specialized kernel's mbarriers too), so a launch that passes too
    little overruns it (the emulator's ASan catches that: tests/test_cuda_emulated.py)."""
    found = [u for u in usages(reports[(filename, arch)]) if kernel in u.entry]
    assert len(found) == sum(n.startswith(f"{kernel}<") for n in shipped_kernels()[filename])
    assert [u.shared_bytes for u in found] == [0] * len(found)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("filename", sorted(shipped_kernels()))
def test_loader_source_compiles_with_nvrtc(filename: str, arch: str) -> None:
    """The exact text the loader hands CuPy (header pasted in) compiles with NVRTC, silently."""
    nvrtc: Any = load_nvrtc()
    if nvrtc is None:
        pytest.skip("NVRTC is not loadable (neither CuPy's nor the nvidia-cuda-nvrtc wheel's)")
    names = shipped_kernels()[filename]
    prog = nvrtc.createProgram(kernel_source(filename), filename, (), ())
    try:
        for name in names:
            nvrtc.addNameExpression(prog, name)
        # The loader's options: an explicit arch instead of the device's.
        options = nvrtc_options(filename, arch)
        try:
            nvrtc.compileProgram(prog, options)
        except Exception as exc:
            pytest.fail(f"NVRTC failed on {filename} ({arch}): {exc}\n{nvrtc.getProgramLog(prog)}")
        assert nvrtc.getProgramLog(prog).strip("\x00 \n") == ""
        assert all(nvrtc.getLoweredName(prog, name) for name in names)
    finally:
        nvrtc.destroyProgram(prog)


def test_warp_kernels_compile_with_nvrtc_as_the_gpu_test_builds_them() -> None:
    """tests/gpu/test_warp_layouts_gpu.py builds tests/cuda_emu/warp_kernels.cu (headers
    pasted) with NVRTC for sm_90a on the GPU: a source it refuses fails here first."""
    nvrtc: Any = load_nvrtc()
    if nvrtc is None:
        pytest.skip("NVRTC is not loadable (neither CuPy's nor the nvidia-cuda-nvrtc wheel's)")
    source = paste_headers(Path(WARP_KERNELS).read_text(encoding="utf-8"))
    prog = nvrtc.createProgram(source, "warp_kernels.cu", (), ())
    try:
        for name in WARP_INSTANCES:
            nvrtc.addNameExpression(prog, name)
        try:
            nvrtc.compileProgram(prog, (*NVRTC_OPTIONS, f"-arch={WARP_ARCH}"))
        except Exception as exc:
            pytest.fail(f"NVRTC failed on warp_kernels.cu: {exc}\n{nvrtc.getProgramLog(prog)}")
        assert all(nvrtc.getLoweredName(prog, name) for name in WARP_INSTANCES)
    finally:
        nvrtc.destroyProgram(prog)


def test_resource_parser_sees_spills_and_stack() -> None:
    # The spill check must be able to fail: a report with spills parses as spilled.
    report = (
        "ptxas info    : Compiling entry function '_Z1kPf' for 'sm_90'\n"
        "ptxas info    : Function properties for _Z1kPf\n"
        "    48 bytes stack frame, 40 bytes spill stores, 44 bytes spill loads\n"
        "ptxas info    : Used 255 registers, 33792 bytes smem, 416 bytes cmem[0]\n"
        "ptxas info    : Compiling entry function '_Z1gPf' for 'sm_90'\n"
        "ptxas info    : Function properties for _Z1gPf\n"
        "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas info    : Used 32 registers, 416 bytes cmem[0]\n"
    )
    spilled, clean = usages(report)
    assert (spilled.entry, spilled.registers, spilled.shared_bytes) == ("_Z1kPf", 255, 33792)
    assert (spilled.stack_bytes, spilled.spill_stores, spilled.spill_loads) == (48, 40, 44)
    assert (clean.registers, clean.shared_bytes, clean.spill_stores, clean.stack_bytes) == (
        32, 0, 0, 0)


# A kernel that reads a wgmma accumulator before waiting for it: ptxas serializes the
# wgmma instructions and adds a wait, both only "ptxas info" lines that -Werror passes.
_SERIALIZED_WGMMA = r"""
#include <cstdint>
extern "C" __global__ void serialized(float* out, uint64_t da, uint64_t db, int n) {
  float d[4] = {0.f, 0.f, 0.f, 0.f};
  for (int i = 0; i < n; ++i) {
    asm volatile("wgmma.fence.sync.aligned;\n");
    asm volatile("wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32 "
                 "{%0, %1, %2, %3}, %4, %5, 1, 1, 1;\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "l"(da + i), "l"(db));
    asm volatile("wgmma.commit_group.sync.aligned;\n");
    if (d[0] > 1.f) d[1] = 0.f;
    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  out[threadIdx.x] = d[0] + d[1] + d[2] + d[3];
}
"""


@needs_nvcc
def test_serialized_wgmma_is_seen(tmp_path: Path) -> None:
    # The performance-note check must be able to fail: real ptxas output of a bad kernel.
    src = tmp_path / "serialized.cu"
    src.write_text(_SERIALIZED_WGMMA)
    done = compile_report(src, "sm_90a")
    assert done.returncode == 0, done.stdout + done.stderr
    notes = advisories(done.stdout + done.stderr)
    assert any("serialized" in note for note in notes), notes
