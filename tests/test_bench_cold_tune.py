"""benchmarks/bench_cold_tune.py: which cache and store each setting's child gets, without a
GPU (the children are stood in for)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import bench_cold_tune as cold


def test_each_setting_gets_its_store_and_the_cache_it_calls_for(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CONVTUNE_COMPILE_THREADS", "5")  # the caller's is never passed on
    seen: list[dict[str, str]] = []

    def child(command: list[str], env: dict[str, str]) -> dict[str, Any]:
        assert command[-6:] == ["--device", "cuda:0", "--model", "vgg16", "--batch", "16"]
        assert "--child" in command
        cache = Path(env["CUPY_CACHE_DIR"])
        assert not cache.exists() or any(cache.iterdir()) == (len(seen) == 2)
        cache.mkdir(parents=True, exist_ok=True)
        (cache / f"kernel{len(seen)}.cubin").write_bytes(b"compiled")  # what a run leaves
        seen.append(env)
        return {"tune_s": 2.0 + len(seen), "ahead_instances": 7 if len(seen) == 1 else 0,
                "ahead_failed": 0, "ahead_s": 1.5, "threads": 4, "process_s": 9.0}

    rows = cold.measure("cuda:0", "vgg16", 16, child)
    assert [r["setting"] for r in rows] == [name for name, _, _ in cold.SETTINGS]
    caches = [e["CUPY_CACHE_DIR"] for e in seen]
    # Cold twice, each from its own empty cache; the warm run reuses the first one's.
    assert caches[0] != caches[1] and caches[2] == caches[0]
    assert len({e["CONVTUNE_DB_URL"] for e in seen}) == 3
    assert [e.get("CONVTUNE_COMPILE_THREADS") for e in seen] == [None, "0", None]
    assert all(e["CONVTUNE_MODEL_DIR"] == "" for e in seen)
    cold.print_table({"date": "2026-11-29", "device": "cuda:0", "model": "vgg16", "batch": 16,
                      "rows": rows})
    out = capsys.readouterr().out
    assert "| cold, compiled ahead | 3.0 | 7, 1.5, 4 | 9.0 |" in out
    assert "| cold, each at its first run | 4.0 | none | 9.0 |" in out


def test_a_failed_child_is_reported_with_its_error() -> None:
    command = [sys.executable, "-c", "import sys; sys.exit('no GPU here')"]
    with pytest.raises(RuntimeError, match="no GPU here"):
        cold.run_child(command, {})


def test_a_child_line_is_read_with_the_process_time() -> None:
    command = [sys.executable, "-c",
               "print('noise'); print('{\"tune_s\": 1.5}')"]
    found = cold.run_child(command, {})
    assert found["tune_s"] == 1.5 and found["process_s"] > 0


def test_the_child_tunes_and_says_what_it_built(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    # On the CPU nothing is built ahead: the child still tunes and reports it so.
    monkeypatch.setenv("CONVTUNE_DB_URL", f"sqlite:///{tmp_path / 'cold.db'}")
    found = cold.tune_here("cpu", "alexnet", 1)
    assert found["tune_s"] > 0
    assert (found["ahead_instances"], found["ahead_failed"], found["threads"]) == (0, 0, 0)
