"""tests/cuda_emu/fuzz.py's draws (no kernel runs here: the campaigns run by hand)."""

from __future__ import annotations

import numpy as np

from tests.cuda_emu.cases import ALGORITHMS
from tests.cuda_emu.fuzz import draw
from tests.precision import make_problem


def test_a_campaign_on_one_family_draws_only_problems_offered_it() -> None:
    seed = int(np.random.default_rng().integers(1 << 30))
    wgmma = ALGORITHMS["implicit_gemm_wgmma"]
    cases = draw(12, ["implicit_gemm_wgmma"], seed, config_has="-nchw")
    assert cases
    for case in cases:
        problem = make_problem(**case["problem"])
        assert wgmma.supports(problem)
        assert any("-nchw" in config for config in wgmma.configs(problem)), problem
    # Without the filter the same seed draws the same cases as before (a seed names a
    # campaign), and most wgmma problems get no NCHW tile.
    plain = draw(40, ["implicit_gemm_wgmma"], seed)
    assert plain == draw(40, ["implicit_gemm_wgmma"], seed)
    offered = [any("-nchw" in c for c in wgmma.configs(make_problem(**case["problem"])))
               for case in plain]
    assert not all(offered)
