"""The cost model's inputs (tuner.features): the implicit GEMM sizes of each direction and
a candidate's work (blocks, waves, fill, launches) as its implementation describes it."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from algorithms.cuda.implicit_gemm import CONFIGS as GEMM_TILES
from algorithms.cuda.implicit_gemm import launch_grid
from algorithms.problem import DIRECTIONS, ConvProblem
from tuner import features as F
from tuner import model as M
from tuner.features import NO_NUMBER, WORK_COLUMNS, Sample, gemm_sizes, work_vector

H100_UNITS = 132


def random_problem(rng: np.random.Generator, direction: str = "forward") -> ConvProblem:
    groups = int(rng.choice([1, 2, 4]))
    r = int(rng.integers(1, 6))
    return ConvProblem(
        n=int(rng.integers(1, 9)), c=groups * int(rng.integers(1, 40)),
        h=int(rng.integers(r, 40)), w=int(rng.integers(r, 40)),
        k=groups * int(rng.integers(1, 70)), r=r, s=r, pad=int(rng.integers(0, 2)),
        stride=int(rng.integers(1, 3)), groups=groups, direction=direction,
    )


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_gemm_sizes_multiply_to_the_problems_flops(direction: str) -> None:
    rng = np.random.default_rng()
    for _ in range(50):
        p = random_problem(rng, direction)
        m, n, k = gemm_sizes(p)
        out_pixels = p.out_hw[0] * p.out_hw[1]
        # backward_data's GEMM runs over dx's pixels, every tap included (a stride makes
        # some products zero); the others' over dy's.
        pixels = p.h * p.w if direction == "backward_data" else out_pixels
        assert 2 * m * n * k * p.groups * out_pixels == p.flops * pixels, p.describe()


def test_work_reads_waves_from_the_tile_grid() -> None:
    p = ConvProblem(n=8, c=64, h=28, w=28, k=96, r=3, s=3, pad=1)
    for config in GEMM_TILES:
        blocks = math.prod(launch_grid(p, config))
        log_blocks, waves, last, fill, log_launches = work_vector(
            "cuda", "implicit_gemm", config, p, H100_UNITS)
        assert log_blocks == pytest.approx(math.log(blocks))
        assert waves == pytest.approx(blocks / H100_UNITS)
        assert last == pytest.approx((blocks - (math.ceil(waves) - 1) * H100_UNITS) / H100_UNITS)
        assert 0 < fill <= 1 and log_launches == 0.0


def test_work_of_the_cpu_counts_python_steps_and_no_blocks() -> None:
    p = ConvProblem(n=3, c=4, h=9, w=9, k=5, r=3, s=3, pad=1)
    got = work_vector("cpu", "direct", "default", p, 2)
    assert got[:3] == (NO_NUMBER,) * 3
    assert got[4] == pytest.approx(math.log(3 * 9))


@pytest.mark.parametrize(("kind", "algorithm", "config"), [
    ("cpu", "not_an_algorithm", "default"),  # a name the running code does not know
    ("", "direct", "default"),  # no device kind
    ("cuda", "implicit_gemm", "96x96x8"),  # a tile no longer shipped (an old stored row)
    ("cuda", "im2col_gemm", "chunk=16"),  # not offered: the batch is below 16
])
def test_work_of_what_the_code_does_not_offer_is_no_number(kind: str, algorithm: str,
                                                           config: str) -> None:
    p = ConvProblem(n=4, c=8, h=12, w=12, k=8, r=3, s=3, pad=1)
    assert work_vector(kind, algorithm, config, p, 132) == (NO_NUMBER,) * len(WORK_COLUMNS)


def test_the_encoders_columns_name_every_value() -> None:
    p = ConvProblem(n=2, c=8, h=12, w=12, k=16, r=3, s=3, pad=1)
    samples = [Sample(p, H100_UNITS, "implicit_gemm", c, 0, kind="cuda") for c in GEMM_TILES]
    encoder = F.Encoder.for_samples(samples)
    assert encoder.matrix(samples).shape == (len(samples), len(encoder.columns))


def wave_time(problem: ConvProblem, config: str) -> float:
    """A synthetic GPU: larger tiles do more work per block at a better rate, and a partial
    last wave of blocks costs a whole one (the quantisation a tree cannot derive from
    thresholds on the sizes)."""
    tile = GEMM_TILES[config]
    waves = math.ceil(math.prod(launch_grid(problem, config)) / H100_UNITS)
    return 1e-6 * waves * (tile.bm * tile.bn) ** 0.7 * problem.c


def test_the_model_learns_wave_quantisation_from_the_work_columns() -> None:
    # What the work columns are for: ranking tiles on unseen layers by their waves.
    rng = np.random.default_rng()

    def problem() -> ConvProblem:
        return ConvProblem(n=int(rng.integers(1, 33)), c=int(rng.integers(8, 129)),
                           h=int(rng.integers(7, 57)), w=int(rng.integers(7, 57)),
                           k=int(rng.integers(16, 513)), r=1, s=1)

    def samples(problems: list[ConvProblem]) -> list[Sample]:
        return [Sample(p, H100_UNITS, "implicit_gemm", c, 0, wave_time(p, c), "cuda")
                for p in problems for c in GEMM_TILES]

    model = M.fit(samples([problem() for _ in range(80)]), members=1)
    assert model is not None
    unseen = [problem() for _ in range(100)]
    hits = 0
    for p in unseen:
        predicted = model.predict(samples([p]))
        pick = min(predicted, key=lambda x: x.time_ms).config
        hits += wave_time(p, pick) <= 1.10 * min(wave_time(p, c) for c in GEMM_TILES)
    # Over ten runs, 95-100% of the picks were within 10% with the work columns and
    # 66-82% without them (work_vector patched to NO_NUMBER throughout).
    assert hits >= 0.86 * len(unseen)


def _columns(problem: ConvProblem) -> dict[str, float]:
    return dict(zip(F.PROBLEM_COLUMNS, F.problem_vector(problem), strict=True))


# Mutation gap: no test read the problem columns by name, so a column computed from the
# wrong quantity (c for c_per_group, the input for the output, bytes without the item size,
# intensity inverted, the w stride or pad taken from h, a GEMM's M and N swapped) went unseen.
def test_each_problem_column_holds_what_its_name_says() -> None:
    p = ConvProblem(n=3, c=12, h=15, w=11, k=18, r=3, s=2, pad=(1, 2), stride=(2, 1),
                    dilation=(2, 1), groups=3, dtype="float16", direction="backward_filter")
    out_h, out_w = (15 + 2 - 5) // 2 + 1, (11 + 4 - 2) // 1 + 1  # dilated filter 5 x 2
    flops = 2 * 3 * 18 * out_h * out_w * 4 * 3 * 2
    moved = 2 * (3 * 12 * 15 * 11 + 3 * 18 * out_h * out_w + 18 * 4 * 3 * 2)  # x, dy, dw
    got = _columns(p)
    assert got == pytest.approx({
        "n": 3, "c": 12, "h": 15, "w": 11, "k": 18, "r": 3, "s": 2, "stride_h": 2,
        "stride_w": 1, "pad_h": 1, "pad_w": 2, "dilation_h": 2, "dilation_w": 1, "groups": 3,
        "c_per_group": 4, "k_per_group": 6, "depthwise": 0, "out_h": 7, "out_w": 14,
        "log_flops": math.log(flops), "log_output": math.log(3 * 18 * 7 * 14),
        "log_bytes": math.log(moved), "intensity": flops / moved, "dtype_bytes": 2,
        "dtype": got["dtype"], "math": got["math"], "direction": got["direction"],
        # backward_filter's GEMM: dw (k/g x c/g*r*s) summed over dy's pixels
        "log_gemm_m": math.log(6), "log_gemm_n": math.log(4 * 3 * 2),
        "log_gemm_k": math.log(3 * 7 * 14),
    })
    # The categories are codes: each value of each reads apart from the others.
    base: dict[str, Any] = dict(n=2, c=8, h=10, w=10, k=8, r=3, s=3, pad=1)
    assert len({_columns(ConvProblem(**base, dtype=d))["dtype"]
                for d in ("float16", "float32", "float64", "bfloat16")}) == 4
    assert (_columns(ConvProblem(**base, math="tf32"))["math"]
            != _columns(ConvProblem(**base, math="fp32"))["math"])
    assert len({_columns(ConvProblem(**base, direction=d))["direction"]
                for d in DIRECTIONS}) == len(DIRECTIONS)
    # Depthwise: one input and one output channel per group; a channel multiplier is not.
    assert _columns(ConvProblem(n=2, c=8, h=9, w=9, k=8, r=3, s=3, groups=8))["depthwise"] == 1
    assert _columns(ConvProblem(n=2, c=8, h=9, w=9, k=16, r=3, s=3, groups=8))["depthwise"] == 0


# Mutation gap: the GEMM sizes were checked only through their product, which any order of
# M, N and K keeps: forward's or backward_filter's M and N swapped went unseen.
def test_gemm_sizes_of_each_direction_in_order() -> None:
    kw: dict[str, Any] = dict(n=2, c=6, h=11, w=9, k=10, r=3, s=1, stride=(2, 1), groups=2)
    out_pixels = 2 * 5 * 9  # n * out_h * out_w
    assert gemm_sizes(ConvProblem(**kw)) == (out_pixels, 5, 3 * 3)
    assert gemm_sizes(ConvProblem(**kw, direction="backward_data")) == (2 * 11 * 9, 3, 5 * 3)
    assert gemm_sizes(ConvProblem(**kw, direction="backward_filter")) == (5, 3 * 3, out_pixels)


# Mutation gap: the last wave's busy share was checked only on grids that never filled the
# last wave exactly; `blocks % units` alone (0 for a full wave) went unseen.
def test_a_full_last_wave_is_wholly_busy() -> None:
    p = ConvProblem(n=8, c=64, h=28, w=28, k=96, r=3, s=3, pad=1)
    config = next(iter(GEMM_TILES))
    blocks = math.prod(launch_grid(p, config))
    divisors = [d for d in (1, 2, 3, 4, 5, 7) if blocks % d == 0]
    assert len(divisors) > 1, blocks
    for waves in divisors:
        got = work_vector("cuda", "implicit_gemm", config, p, blocks // waves)
        assert got[1:3] == pytest.approx((waves, 1.0))


# Mutation gap: no config name with two other numbers was read ("f4x4": Winograd's tile), so
# keeping only the first went unseen.
def test_a_config_s_two_other_numbers_are_both_read() -> None:
    assert F.config_numbers("f4x4")[-2:] == (4.0, 4.0)
    assert F.config_numbers("f2x2")[-2:] == (2.0, 2.0)
    assert F.config_numbers("chunk=8-merged")[-2:] == (8.0, NO_NUMBER)


# Mutation gap: the encoder's candidate columns were checked by the matrix's shape only: a
# units or workspace column left at zero, or every algorithm one-hot in one column, went unseen.
def test_the_encoder_puts_each_value_under_its_column() -> None:
    p = ConvProblem(n=2, c=8, h=12, w=12, k=16, r=3, s=3, pad=1)
    tile = next(iter(GEMM_TILES))
    samples = [Sample(p, 7, "direct", "default", 4095, kind="cpu"),
               Sample(p, 9, "im2col_gemm", "chunk=all", 0, kind="cpu"),
               Sample(p, H100_UNITS, "implicit_gemm", tile, 0, kind="cuda")]
    encoder = F.Encoder.for_samples(samples)
    rows = [dict(zip(encoder.columns, row, strict=True)) for row in encoder.matrix(samples)]
    assert [r["units"] for r in rows] == [7.0, 9.0, H100_UNITS]
    assert [r["log_workspace"] for r in rows] == pytest.approx([math.log(4096), 0.0, 0.0])
    names = ("algorithm=direct", "algorithm=im2col_gemm", "algorithm=implicit_gemm")
    assert [tuple(r[n] for n in names) for r in rows] == [(1, 0, 0), (0, 1, 0), (0, 0, 1)]
    assert all(r[name] == v for r in rows for name, v in _columns(p).items())
    # The work columns are the candidate's on its own device's units.
    work = dict(zip(WORK_COLUMNS, work_vector("cuda", "implicit_gemm", tile, p, H100_UNITS),
                    strict=True))
    assert {n: rows[2][n] for n in WORK_COLUMNS} == work and work["waves"] > 0
    # An algorithm the encoder never saw sets no one-hot column (and is not "known").
    unknown = encoder.matrix([Sample(p, 7, "fft", "default", 0, kind="cpu")])[0]
    assert not encoder.knows("fft") and unknown[-3:].tolist() == [0.0, 0.0, 0.0]
