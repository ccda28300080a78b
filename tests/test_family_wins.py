"""benchmarks/family_wins.py: each layer's families side by side, and the wins per network."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from algorithms.problem import ConvProblem
from benchmarks import family_wins


def test_each_family_is_shown_against_the_layers_best(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    rng = np.random.default_rng()
    fast, slow = sorted(float(v) for v in rng.uniform(0.1, 1.0, size=2))
    pointwise = ConvProblem(n=4, c=64, h=7, w=7, k=512, r=1, s=1, math="tf32")
    rows = [{"network": "net", "problem": p.key(), "algorithms": {
        "implicit_gemm_tc": {"configs": {"64x64": {"status": "ok", "ms": tc,
                                                   "workspace_bytes": 0}}},
        "implicit_gemm_wgmma": {"configs": {"128x128x32-s4": {"status": "ok", "ms": wg,
                                                              "workspace_bytes": 0}}},
    }} for p, tc, wg in ((pointwise, fast, slow),
                         # 3x3 and fp32: left out by the default --math tf32 --filter 1
                         (ConvProblem(n=4, c=64, h=7, w=7, k=64, r=3, s=3, pad=1), slow, fast))]
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"device": {"kind": "cuda", "name": "GPU", "units": 132},
                                "rows": rows}))
    monkeypatch.setattr(sys, "argv", ["family_wins.py", "--results", str(path)])
    family_wins.main()
    out = capsys.readouterr().out
    assert f"| net | 196 | 512 | 64 | 1 | 1.00 (64x64) | {slow / fast:.2f} (128x128x32-s4) | - " \
           "| implicit_gemm_tc |" in out
    assert out.strip().endswith("net: implicit_gemm_tc 1")
