"""benchmarks/compare_runs.py: two bench_gpu.py runs layer by layer, and what was new."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from algorithms.problem import ConvProblem
from benchmarks import compare_runs

FIRST = ConvProblem(n=4, c=64, h=7, w=7, k=512, r=1, s=1, math="tf32")
SECOND = ConvProblem(n=4, c=64, h=7, w=7, k=64, r=3, s=3, pad=1)


def _row(problem: ConvProblem, layer: str, configs: dict[tuple[str, str], dict[str, Any]],
         pick: tuple[str, str], cudnn_ms: float) -> dict[str, Any]:
    algorithms: dict[str, Any] = {}
    for (name, config), entry in configs.items():
        algorithms.setdefault(name, {"configs": {}})["configs"][config] = entry
    ours = configs[pick]["ms"]
    return {"network": "net", "layer": layer, "problem": problem.key(),
            "describe": problem.describe(), "algorithms": algorithms,
            "tuned": {"algorithm": pick[0], "config": pick[1], "ms": ours},
            "cudnn": {"ms": cudnn_ms}, "speed_vs_cudnn": cudnn_ms / ours}


def _ok(ms: float) -> dict[str, Any]:
    return {"status": "ok", "ms": ms, "workspace_bytes": 0}


def _runs() -> tuple[dict[str, Any], dict[str, Any], float, float]:
    rng = np.random.default_rng()
    best, cudnn = (float(v) for v in rng.uniform(0.1, 1.0, size=2))
    tc, wg = "implicit_gemm_tc", "implicit_gemm_wgmma"
    old = {"device": {"name": "GPU"}, "rows": [
        _row(FIRST, "a", {(tc, "64x64"): _ok(best * 1.5), (tc, "64x64-k2"): _ok(best * 2)},
             (tc, "64x64"), cudnn),
        _row(SECOND, "b", {(tc, "64x64"): _ok(best)}, (tc, "64x64"), cudnn),
        # Another batch: a different problem under the same name, in the old run only.
        _row(ConvProblem(n=8, c=64, h=7, w=7, k=512, r=1, s=1, math="tf32"), "a",
             {(tc, "64x64"): _ok(best)}, (tc, "64x64"), cudnn)]}
    # The new run: on "a" two new NCHW tiles (one the pick, 1.0 of the fastest) and a split
    # of the old tile with another count (same family as an old one, still new here); on "b"
    # a new tile that gave a wrong result and one that failed, the old pick kept but slower.
    new = {"device": {"name": "GPU"}, "rows": [
        _row(FIRST, "a", {(tc, "64x64"): _ok(best * 1.5), (tc, "64x64-k2"): _ok(best * 2),
                          (tc, "64x64-k3"): _ok(best * 1.8),
                          (wg, "128x128x32-s5-f1-nchw"): _ok(best),
                          (wg, "64x128x32-s4-f1-nchw"): _ok(best * 1.2)},
             (wg, "128x128x32-s5-f1-nchw"), cudnn * 1.1),
        _row(SECOND, "b", {(tc, "64x64"): _ok(best * 1.2),
                           (wg, "96x128x32-s4-f1-nchw"): {"status": "wrong", "ms": None,
                                                          "rel_error": 0.9},
                           (wg, "64x128x32-s3"): {"status": "error", "error": "CUDA|boom"}},
             (tc, "64x64"), cudnn)]}
    return old, new, best, cudnn


def test_family_folds_tiles_stages_and_splits() -> None:
    assert compare_runs.family("implicit_gemm_wgmma", "128x128x32-s5-f1-nchw") == \
        "implicit_gemm_wgmma/*-sS-f1-nchw"
    assert compare_runs.family("implicit_gemm_tc", "64x128-k6") == "implicit_gemm_tc/*-kS"
    assert compare_runs.family("direct", "16x16k8") == "direct/*k8"
    assert compare_runs.family("im2col_gemm", "chunk=all-merged") == "im2col_gemm/chunk=all-merged"


def test_new_configurations_their_wins_and_failures_are_reported() -> None:
    old, new, best, cudnn = _runs()
    cmp = compare_runs.compare(old, new, "old.json", "new.json")
    assert (len(cmp.layers), cmp.only_old, cmp.only_new) == (2, 1, 0)
    a, b = cmp.layers
    assert a.pick_is_new and not b.pick_is_new
    assert a.new_configs == 3 and b.new_configs == 2
    assert a.new_best == ("implicit_gemm_wgmma", "128x128x32-s5-f1-nchw")
    assert a.new_best_vs_fastest == pytest.approx(1.0)
    assert a.cudnn_drift == pytest.approx(1.1)
    assert a.old_ratio == pytest.approx(cudnn / (best * 1.5))
    assert a.new_ratio == pytest.approx(cudnn * 1.1 / best)
    assert b.new_best is None and b.new_best_vs_fastest is None
    assert [(c[1], s) for c, s, _ in b.new_failures] == [("64x128x32-s3", "error"),
                                                        ("96x128x32-s4-f1-nchw", "wrong")]
    assert cmp.wins_by_family == {"implicit_gemm_wgmma/*-sS-f1-nchw": 1}
    assert cmp.new_by_family["implicit_gemm_wgmma/*-sS-f1-nchw"] == {"ok": 2, "wrong": 1}
    assert cmp.new_by_family["implicit_gemm_tc/*-kS"] == {"ok": 1}
    text = compare_runs.markdown(cmp)
    assert "- layers in both runs: 2 (only in the old: 1, only in the new: 0)" in text
    assert "- layers picked by a configuration new in this run: 1" in text
    assert "- layers more than 5% slower against cuDNN: 1 (net:b)" in text
    assert "| implicit_gemm_wgmma/*-sS-f1-nchw | 3 | 2 | 1 | 0 | 1 |" in text
    assert "| net | b | implicit_gemm_wgmma/64x128x32-s3 | error | CUDA/boom |" in text


def test_latest_is_the_newest_stored_run_of_the_same_mode_and_gpu(tmp_path: Path) -> None:
    def write(folder: str, name: str, gpu: str) -> Path:
        path = tmp_path / folder / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps({"device": {"name": gpu}, "rows": []}))
        return path

    write("2026-11-25-h200", "bench_fp32.json", "H200")
    newest = write("2026-11-27-h200", "bench_fp32.json", "H200")
    write("2026-11-27-h200", "bench_tf32.json", "H200")  # another mode
    write("2026-11-28-h100", "bench_fp32.json", "H100")  # another GPU, newer
    (tmp_path / "2026-11-28-x").mkdir()
    (tmp_path / "2026-11-28-x" / "bench_fp32.json").write_text("not json")
    new = write("2026-11-29-h200", "bench_fp32.json", "H200")
    assert compare_runs.latest(new, tmp_path) == newest
    # A stored run is compared with the runs before it, not with later ones.
    later = write("2026-11-30-h200", "bench_fp32.json", "H200")
    assert compare_runs.latest(new, tmp_path) == newest
    outside = tmp_path.parent / f"{tmp_path.name}-call" / "bench_fp32.json"
    outside.parent.mkdir()
    outside.write_text(new.read_text())  # a call's own file, not yet stored: the newest
    assert compare_runs.latest(outside, tmp_path) == later
    alone = write("2026-11-29-a100", "bench_tf32.json", "A100")
    assert compare_runs.latest(alone, tmp_path) is None


def test_usage_errors_exit_2_with_one_line(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bench_fp32.json"
    path.write_text(json.dumps({"device": {"name": "GPU"}, "rows": []}))
    for argv in ([str(path)], [str(path), str(path), str(path)], ["--latest", str(path), str(path)],
                 [str(path), str(tmp_path / "missing.json")]):
        with pytest.raises(SystemExit) as exited:
            compare_runs.main(argv)
        assert exited.value.code == 2
        assert "error: " in capsys.readouterr().err.strip().splitlines()[-1]


def test_writes_the_table_and_the_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    old, new, _, _ = _runs()
    paths = []
    for name, run in (("old", old), ("new", new)):
        paths.append(tmp_path / name / "bench_fp32.json")
        paths[-1].parent.mkdir()
        paths[-1].write_text(json.dumps(run))
    out, plot = tmp_path / "cmp.md", tmp_path / "cmp.png"
    assert compare_runs.main([*map(str, paths), "--out", str(out), "--plot", str(plot)]) == 0
    assert "fastest new config" in out.read_text()
    assert plot.stat().st_size > 1000
