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


@pytest.mark.skipif(shutil.which("nvcc") is None or find_cuobjdump() is None,
                    reason="needs nvcc and cuobjdump (the test extra)")
def test_1xtf32_fragments_are_rounded_as_they_are_read() -> None:
    # 1xTF32 rounds each fragment element it reads (cvt.rna: an FSETP each), not its copies
    # in shared memory, which cost a shared-memory pass the H100 had no room for (implicit_
    # gemm_tc.cu): 128x64, 4 warps of 64x32, two k8 steps a K-step, each reading 4 x 4 A and
    # 4 x 2 B registers a thread, 48 roundings; 24 rounded in place, one per copied element.
    nvcc = shutil.which("nvcc")
    assert nvcc is not None
    sass = compile_sass("implicit_gemm_tc.cu",
                        "implicit_gemm_tc_conv<float, 128, 64, 2, 2, 3, 1, 4, 4, false, 16>",
                        KERNELS_DIR, nvcc, "sm_90a")
    kinds = Counter(opcode(t) for t in main_loop(instructions(sass)))
    assert kinds["HMMA"] == 2 * 4 * 4  # two k8 steps of 4 x 4 mma tiles
    assert kinds["LDGSTS"] == 4 + 2
    assert kinds["FSETP"] == 2 * (4 * 4 + 4 * 2)
