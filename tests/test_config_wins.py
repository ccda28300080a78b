"""benchmarks/config_wins.py: how often each configuration comes close to a layer's best."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from algorithms.problem import ConvProblem
from benchmarks import config_wins


def test_splits_fold_into_one_row_and_rows_never_close_are_counted(tmp_path: Path) -> None:
    rng = np.random.default_rng()
    best = float(rng.uniform(0.1, 1.0))
    first, second = (ConvProblem(n=4, c=64, h=7, w=7, k=512, r=1, s=1, math="tf32"),
                     ConvProblem(n=4, c=64, h=7, w=7, k=64, r=3, s=3, pad=1))
    # Per layer: 64x64 fastest on the first, 5% behind on the second; its splits "-k2" and
    # "-k3" one row, counted once a layer by the better; 128x128 never within 10%.
    times = {first: {"64x64": best, "64x64-k2": best * 1.3, "64x64-k3": best * 1.05,
                     "128x128": best * 1.2},
             second: {"64x64": best * 1.05, "64x64-k2": best, "128x128": best * 1.5}}
    rows = [{"network": "net", "problem": p.key(), "algorithms": {"implicit_gemm_tc": {
        "configs": {c: {"status": "ok", "ms": ms, "workspace_bytes": 0}
                    for c, ms in measured.items()}}}} for p, measured in times.items()]
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"device": {"kind": "cuda", "name": "GPU", "units": 132},
                                "rows": rows}))
    found = config_wins.tally([path], 0.10, by_math=False)
    assert set(found) == {("implicit_gemm_tc", c) for c in ("64x64", "64x64-kS", "128x128")}
    plain, split, large = (found["implicit_gemm_tc", c] for c in ("64x64", "64x64-kS", "128x128"))
    assert (plain.layers, plain.fastest, plain.close) == (2, 1, 2)
    assert (split.layers, split.fastest, split.close) == (2, 1, 2)
    assert (large.layers, large.fastest, large.close) == (2, 0, 0)
    assert abs(large.best_ratio - 1.2) < 1e-9
    by_math = config_wins.tally([path], 0.10, by_math=True)
    assert by_math["tf32", "implicit_gemm_tc", "128x128"].layers == 1
    text = config_wins.markdown(found, 0.10)
    assert "| implicit_gemm_tc | 128x128 | 2 | 0 | 0 | 1.20 |" in text
    assert text.endswith("1 of 3 rows never within 10% of a layer's fastest: 2 of 6 "
                         "measurements (folded rows count a layer once).")
