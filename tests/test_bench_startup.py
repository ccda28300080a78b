"""benchmarks/bench_startup.py: its children run against the tree they are given."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import bench_startup as bench


def test_a_child_reports_its_own_seconds_from_the_tree(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "tuner").mkdir(parents=True)
    (tree / "tuner" / "__init__.py").write_text("import time\ntime.sleep(0.05)\n")
    wall, own = bench.run_child(tree, bench.child_code("import tuner", ""))
    assert 0.05 <= own <= wall


def test_a_failing_child_raises_with_its_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        bench.run_child(tmp_path, bench.child_code("1 / 0", ""))


def test_children_are_given_the_device_and_the_store() -> None:
    code = bench.child_code("print(DEVICE, URL)", "sqlite:///x.db", "cuda:1")
    assert "URL, DEVICE = 'sqlite:///x.db', 'cuda:1'" in code
    assert all("DEVICE" in bench.CHILDREN[name] for name in ("cached answer",
                                                             "plan's first call"))


# Regression: a child's PYTHONPATH was the tree alone, so on the GPU machine, where
# gpu_session.sh installs SQLAlchemy into a folder on PYTHONPATH, `import tuner` failed.
def test_a_child_keeps_the_callers_python_path(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "carried_wheel.py").write_text("VALUE = 7\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    tree = tmp_path / "tree"
    (tree / "tuner").mkdir(parents=True)
    (tree / "tuner" / "__init__.py").write_text("import carried_wheel\n")
    wall, own = bench.run_child(tree, bench.child_code("import tuner", ""))
    assert 0 <= own <= wall
