"""benchmarks/kernel_loop_sass.py: the loop it cuts out of cuobjdump's SASS, and what it counts."""

from __future__ import annotations

import shutil
from collections import Counter

import pytest

from algorithms.cuda._loader import KERNELS_DIR
from benchmarks.kernel_loop_sass import (
    compile_sass,
    find_cuobjdump,
    instructions,
    main_loop,
    opcode,
)

SASS = """
        code for sm_90a
        /*0000*/                   LDC R1, c[0x0][0x28] ;                 /* 0x00000a00ff017b82 */
        /*0010*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;          /* 0x0000000000007b1d */
        /*0020*/                   LDS R4, [R2] ;                         /* 0x0000000002047984 */
        /*0030*/              @!PT LDS RZ, [RZ] ;                         /* 0x00000000fffff984 */
        /*0040*/                   HMMA.1688.F32.TF32 R8, R4, R6, R8 ;    /* 0x0000000604087237 */
        /*0050*/              @!P0 IMAD.IADD.U32 R4, R4, 0x1, R0 ;        /* 0x0000000104048824 */
        /*0060*/              @P1 BRA 0x10 ;                              /* 0xfffffffc00fc7947 */
        /*0070*/                   HMMA.1688.F32.TF32 R8, R4, R6, R8 ;    /* 0x0000000604087237 */
        /*0080*/                   BRA 0x70 ;                             /* 0xfffffffc00fc7947 */
        /*0090*/                   EXIT ;                                 /* 0x000000000000794d */
"""


def test_the_loop_is_the_backward_branch_with_the_most_mma() -> None:
    found = instructions(SASS)
    assert found[0] == (0, "LDC R1, c[0x0][0x28]")
    assert all("@!PT" not in text for _, text in found)  # never issued: not counted
    body = main_loop(found)
    # 0x10..0x60 holds one HMMA, 0x70..0x80 one too and is smaller: the tie goes to it.
    assert [opcode(t) for t in body] == ["HMMA", "BRA"]


def test_opcodes_drop_predicates_and_modifiers() -> None:
    assert opcode("@!P0 IMAD.IADD.U32 R4, R4, 0x1, R0") == "IMAD"
    assert opcode("HMMA.1688.F32.TF32 R8, R4, R6, R8") == "HMMA"


@pytest.mark.parametrize("widths, copies, roundings", [
    # vector B (1x1 at stride 1): every fragment element read is rounded, two k8 steps a
    # K-step each reading 4 x 4 A and 4 x 2 B registers a thread
    ((4, 4), 4 + 2, 2 * (4 * 4 + 4 * 2)),
    # element-wise B: each thread rounds its landed copies in shared memory once, 4 A vectors
    # of 4 and 8 B elements, and reads its fragments as they are (ROUND_IN_PLACE)
    ((4, 1), 4 + 8, 4 * 4 + 8),
])
def test_1xtf32_rounds_where_the_tile_path_says(widths: tuple[int, int], copies: int,
                                                roundings: int) -> None:
    # implicit_gemm_tc.cu ROUND_IN_PLACE: shared memory bound the vector-B tiles on an H100
    # (2026-11-27), so they round in registers; the element-wise-B ones, heavier in copy
    # instructions, round their copies once in shared memory. One FSETP per rounding.
    if shutil.which("nvcc") is None or find_cuobjdump() is None:
        pytest.skip("needs nvcc and cuobjdump (the test extra)")
    nvcc = shutil.which("nvcc")
    assert nvcc is not None
    sass = compile_sass(
        "implicit_gemm_tc.cu",
        f"implicit_gemm_tc_conv<float, 128, 64, 2, 2, 3, 1, {widths[0]}, {widths[1]}, false, 16>",
        KERNELS_DIR, nvcc, "sm_90a")
    kinds = Counter(opcode(t) for t in main_loop(instructions(sass)))
    assert kinds["HMMA"] == 2 * 4 * 4  # two k8 steps of 4 x 4 mma tiles
    assert kinds["LDGSTS"] == copies
    assert kinds["FSETP"] == roundings
