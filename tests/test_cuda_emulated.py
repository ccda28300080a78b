"""The CUDA backend's own kernels, run on the CPU through its real host code, under sanitizers.

tests/cuda_emu compiles each shipped kernel instance from the text NVRTC gets on a GPU, runs
every CUDA thread as a fiber (forward, then reverse schedule: a barrier race changes the
result), with AddressSanitizer on every global and shared array and UBSan on indexing,
alignment and integer overflow; `run()` of each algorithm drives it exactly as on a GPU
(grids, argument types and order, shared-memory sizes, workspace layout), with cuBLAS and
cuFFT replaced by NumPy stand-ins that check their operands; warp-level PTX (mma.sync,
ldmatrix, cp.async) is emulated by tests/cuda_emu/warp.h. What this cannot see: warp-level
timing, the memory model beyond barriers, NVRTC itself, the real cuBLAS/cuFFT, and speed;
tests/gpu covers those on a GPU. The cases, with the injected bugs each one catches, are
listed in tests/cuda_emu/table.
"""

from __future__ import annotations

from typing import Any

import pytest

from algorithms.base import AlgorithmBase
from algorithms.cuda import (
    _wgmma_nchw,
    depthwise,
    implicit_gemm_tc,
    implicit_gemm_wgmma,
    shipped_kernels,
    winograd,
)
from algorithms.cuda._launch import ENV
from algorithms.cuda._loader import CTYPES
from algorithms.problem import DTYPES
from tests.cuda_emu.build import build_all, missing_tools
from tests.cuda_emu.cases import ALGORITHMS, SCHEDULES, run_cases
from tests.cuda_emu.table import CASES
from tests.cuda_emu.table.backward import BWD_ALGORITHMS, BWD_DIRECTIONS, BWD_SHAPES
from tests.cuda_emu.table.tc import TC_SHAPES
from tests.cuda_emu.table.wgmma import WG_SHAPES
from tests.precision import make_problem

_missing = missing_tools()
pytestmark = pytest.mark.skipif(_missing is not None, reason=f"cannot emulate: {_missing}")

#: Where the implicit-GEMM kernel's `vec_out` sits among its scalar arguments (after the
#: ConvShape structure).
_VEC_OUT_ARG = 1


@pytest.fixture(scope="module")
def verdicts() -> dict[str, dict[str, Any]]:
    """Every case's verdict (kernels built in parallel first, then two process chains)."""
    build_all(shipped_kernels())
    return run_cases(list(CASES.values()))


@pytest.mark.parametrize("case_id", list(CASES))
def test_matches_reference_race_free_in_bounds(verdicts: dict[str, dict[str, Any]],
                                               case_id: str) -> None:
    verdict = verdicts[case_id]
    assert verdict["status"] == "ok", verdict["message"]


def test_every_algorithm_and_dtype_is_covered() -> None:
    covered = {(c["algorithm"], c["problem"].get("dtype", "float32")) for c in CASES.values()}
    for name in ALGORITHMS:
        assert (name, "float32") in covered
    wgmma = {(c["problem"]["dtype"], c["problem"].get("math", "fp32")) for c in CASES.values()
             if c["algorithm"] == "implicit_gemm_wgmma"}
    assert wgmma == set(WG_SHAPES)
    tc = {(c["problem"]["dtype"], c["problem"]["math"]) for c in CASES.values()
          if c["algorithm"] == "implicit_gemm_tc"}
    assert tc == set(TC_SHAPES)
    assert {d for n, d in covered if n == "implicit_gemm"} == {"float32", "float16"}
    assert {d for n, d in covered if n == "fft"} == set(CTYPES)  # fft has no bfloat16
    assert {d for n, d in covered if n == "winograd"} == set(CTYPES)
    assert {d for n, d in covered if n == "depthwise"} == set(DTYPES)


def test_tensor_core_vector_fills_exactly_where_allowed(
        verdicts: dict[str, dict[str, Any]]) -> None:
    """Forward tc cases run the NCHW instance whose (A, B) copy widths the problem and the
    operands' alignment allow: A vectors when C/groups*R*S is a whole number of 16-byte
    vectors, B vectors also on 1x1 stride-1 unpadded layers with P*Q a whole number; and
    NHWC instances (both in vectors) exactly when C/groups is whole vectors and B is not.
    Every instance launched is a shipped one (compiled spill-free by test_kernels_compile):
    an NCHW "-sS" tile with a misaligned operand runs 128x128 instead."""
    shipped = set(shipped_kernels()[implicit_gemm_tc.KERNEL_FILE])
    for case_id, case in CASES.items():
        if case["algorithm"] != "implicit_gemm_tc" or "direction" in case["problem"]:
            continue
        verdict = verdicts[case_id]
        assert verdict["status"] == "ok", verdict["message"]
        p = make_problem(**case["problem"])
        vec = 4 if p.dtype == "float32" else 8
        out_h, out_w = p.out_hw
        x_off, w_off, _y_off = case["offsets"] or (0, 0, 0)
        a_vec = w_off % 16 == 0 and (p.c // p.groups * p.r * p.s) % vec == 0
        b_vec = a_vec and x_off % 16 == 0 and (p.r, p.s, p.stride, p.pad) == (
            1, 1, (1, 1), (0, 0)) and (out_h * out_w) % vec == 0
        nhwc_expected = (p.c // p.groups) % vec == 0 and not (
            (p.r, p.s, p.stride, p.pad) == (1, 1, (1, 1), (0, 0)) and (out_h * out_w) % vec == 0)
        layouts = set()
        for name, _args in verdict["launches"]:
            if not name.startswith("implicit_gemm_tc_conv<"):
                continue  # the NHWC configurations' transposes
            assert name in shipped, (case_id, name)
            *_, va, vb, nhwc, _bk = (f.strip()
                                     for f in name.rstrip(">").split("<")[1].split(","))
            layouts.add(nhwc)
            expected = (vec, vec) if nhwc == "true" else (vec if a_vec else 1, vec if b_vec else 1)
            assert (int(va), int(vb)) == expected, (case_id, name)
        assert layouts == ({"false", "true"} if nhwc_expected else {"false"}), case_id


#: Mutations of kernels/common.cuh's sum_split_tile these cases catch (each tried once, over
#: the 103 implicit_gemm_tc and implicit_gemm_wgmma cases, 2026-11-27):
#:   the last block leaves its tile's count as it is         -> 22 of 103 (the second run, on
#:                                                              the same counters, sums none)
#:   the last block starts from its own split's partial sums
#:   (the sum's order then depends on which block ran last)  -> 8 of 103; with the emulator's
#:                                                              blocks always in launch order,
#:                                                              0 (of tc's 80, tried earlier)
def test_split_k_is_summed_in_the_gemm_kernel(verdicts: dict[str, dict[str, Any]]) -> None:
    """A tensor-core case launches exactly the kernels `work` counts (split K: no summing
    kernel; the last block of each tile sums the splits, whichever block ran last, as the
    two schedules, whose blocks run in opposite orders, agree bit for bit; and it leaves
    its counters at zero, as the second run reuses them), and many cases offer splits."""
    split_cases = 0
    for case_id, case in CASES.items():
        name = case["algorithm"]
        if name not in ("implicit_gemm_tc", "implicit_gemm_wgmma"):
            continue
        verdict = verdicts[case_id]
        assert verdict["status"] == "ok", verdict["message"]
        algorithm, problem = ALGORITHMS[name], make_problem(**case["problem"])
        assert isinstance(algorithm, AlgorithmBase)  # `work` is AlgorithmBase's
        configs = algorithm.configs(problem)
        # An NCHW wgmma configuration copies a misaligned w to the workspace first (with taps
        # it always does, and `work` counts that transpose).
        w_copies = sum(c.split("-k")[0].endswith(_wgmma_nchw.SUFFIX) for c in configs
                       ) if (case["offsets"] or (0, 0))[1] % 16 and not _wgmma_nchw.taps(
                           problem) else 0
        assert len(verdict["launches"]) == len(SCHEDULES) * (w_copies + sum(
            algorithm.work(problem, c).launches for c in configs)), case_id
        split_cases += any("-k" in c for c in configs)
    assert split_cases >= 10


def test_every_winograd_instance_runs(verdicts: dict[str, dict[str, Any]]) -> None:
    launched = {name for case_id, verdict in verdicts.items() if case_id.startswith("winograd")
                for name, _args in verdict.get("launches", [])}
    assert launched == set(winograd.shipped_kernels())


@pytest.mark.parametrize("name, module", [("depthwise", depthwise),
                                          ("implicit_gemm_wgmma", implicit_gemm_wgmma),
                                          ("implicit_gemm_wgmma", _wgmma_nchw)])
def test_every_shipped_instance_runs(verdicts: dict[str, dict[str, Any]], name: str,
                                     module: Any) -> None:
    launched = {kernel for case_id, case in CASES.items() if case["algorithm"] == name
                for kernel, _args in verdicts[case_id].get("launches", [])}
    assert set(module.shipped_kernels()) <= launched


def test_every_backward_kernel_and_dtype_is_covered() -> None:
    covered = {(c["algorithm"], c["problem"].get("direction"), c["problem"].get("dtype", "float32"))
               for c in CASES.values()}
    for name in BWD_ALGORITHMS:
        for direction in BWD_DIRECTIONS:
            for dtype in CTYPES:
                supported = ALGORITHMS[name].supports(
                    make_problem(**BWD_SHAPES["odd"], dtype=dtype, direction=direction))
                assert ((name, direction, dtype) in covered) == bool(supported)
    tc = {(c["problem"]["direction"], c["problem"]["dtype"], c["problem"]["math"])
          for c in CASES.values()
          if c["algorithm"] == "implicit_gemm_tc" and "direction" in c["problem"]}
    assert tc == {(d, *key) for d in BWD_DIRECTIONS for key in TC_SHAPES}


def test_float16_backward_filter_sums_in_float32(verdicts: dict[str, dict[str, Any]]) -> None:
    """im2col_gemm's float16 dW is summed over the batch in float32, rounded once at the end."""
    verdict = verdicts["im2col_gemm-backward_filter-deep_batch-float16"]
    assert verdict["status"] == "ok", verdict["message"]
    names = [name for name, _args in verdict["launches"]]
    configs = len(verdict["errors"])
    assert names.count("round_to_storage<half_t>") == configs * len(SCHEDULES)


@pytest.mark.parametrize("y_off", [0, 4, 8, 12])
def test_vector_stores_only_when_aligned(verdicts: dict[str, dict[str, Any]],
                                         y_off: int) -> None:
    verdict = verdicts[f"vec-y{y_off}"]
    assert verdict["status"] == "ok", verdict["message"]
    flags = {args[_VEC_OUT_ARG] for _name, args in verdict["launches"]}
    assert flags == {int(y_off == 0)}


def test_no_vector_stores_when_pq_is_not_a_multiple_of_4(
        verdicts: dict[str, dict[str, Any]]) -> None:
    for shape in ("pq_odd_k_odd", "pq_2", "pq_6_groups"):
        verdict = verdicts[f"implicit_gemm-{shape}-float32-offset"]
        assert verdict["launches"]
        assert all(args[_VEC_OUT_ARG] == 0 for _name, args in verdict["launches"])


#: Cases whose runs launch through prepared parameter buffers (algorithms.cuda._launch):
#: tensor-core tiles (NCHW, NHWC with its copies, split K), wgmma, im2col_gemm,
#: direct, implicit_gemm, depthwise, winograd, and backward_data's rearranging copies.
_PREPARED_CASES = ("implicit_gemm_tc-odd-float32-fp32",
                   "implicit_gemm_wgmma-tc_nhwc_geom-float16-fp32-offset",
                   "im2col_gemm-odd-float32", "direct-odd-float32", "implicit_gemm-odd-float32",
                   "depthwise-depthwise-float32", "winograd-odd-float32",
                   "implicit_gemm_tc-backward_data-holes_s3_pad-float32-fp32")


def test_prepared_launches_are_what_runs(verdicts: dict[str, dict[str, Any]]) -> None:
    """The emulated cases of tc, wgmma and im2col_gemm launch from prepared buffers, which
    the emulated kernels read by their own signatures (as cuLaunchKernel's driver does)."""
    for case_id in _PREPARED_CASES:
        verdict = verdicts[case_id]
        assert verdict["status"] == "ok", verdict["message"]
        assert verdict["prepared"] == len(verdict["launches"]) > 0, case_id


#: Mutations of algorithms/cuda/_replay.py and _cublas.py these cases catch (each tried
#: once over six cases: direct, implicit_gemm, implicit_gemm_tc, depthwise, winograd,
#: im2col_gemm, 2026-11-28):
#:   x's and w's addresses swapped in a replay          -> 6 of 6 (AddressSanitizer)
#:   a replay's last call dropped                       -> 6 of 6 (y left as NaN)
#:   every argument taken as fixed (none moved)         -> 6 of 6 (y left as NaN)
#:   cuBLAS called in a dry run instead of recorded     -> 2 of 6: the two with GEMMs
#:                                                         (AddressSanitizer SEGV)
#:   fft marked replayable (cuFFT calls not recorded)   -> its case (AddressSanitizer)
def test_replays_are_what_plans_run(verdicts: dict[str, dict[str, Any]]) -> None:
    """Every configuration of a replayable algorithm's case ran its second schedule as a
    plan replays it (algorithms.cuda._replay), worked out on the first schedule's operands
    and replayed at the second's, and matched the first bit for bit; others ran."""
    moved = 0
    for case_id, case in CASES.items():
        verdict = verdicts[case_id]
        if verdict["status"] != "ok":
            continue  # failed elsewhere
        configs = len(verdict["errors"])
        replayable = getattr(ALGORITHMS[case["algorithm"]], "replayable", False)
        assert sum(verdict["replayed"]) == (configs if replayable else 0), case_id
        moved += verdict["replayed"][0]
    # The two schedules' operands agree modulo 16 (exact-size heap blocks, or offsets
    # from 256-byte boundaries), so the replay is checked at other addresses.
    replayed = sum(sum(v["replayed"]) for v in verdicts.values() if v["status"] == "ok")
    assert moved == replayed >= 3000


def test_launches_without_prepared_buffers(monkeypatch: pytest.MonkeyPatch) -> None:
    # Regression: with CONVTUNE_PREPARED_LAUNCH=0, GemmLaunch took its cached "no prepared
    # launch" entry for a pair of launches and called None on its second run.
    monkeypatch.setenv(ENV, "0")
    found = run_cases([CASES[case_id] for case_id in _PREPARED_CASES])
    for case_id, verdict in found.items():
        assert verdict["status"] == "ok", (case_id, verdict.get("message"))
        assert verdict["prepared"] == 0 and verdict["launches"], case_id
