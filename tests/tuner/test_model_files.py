"""Fitted cost models on disk: a later process loads the fit instead of fitting again."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from db.engine import Store, close_stores, open_store
from tests.tuner.fakes import small_problem
from tests.tuner.test_model import SPEED, UNSEEN, seed, training_problems
from tuner import model as M
from tuner import model_files
from tuner.features import Sample
from tuner.model import ModelCache


def predictions(model: M.CostModel | None) -> list[float]:
    assert model is not None
    return [p.time_ms for p in model.predict(
        [Sample(UNSEEN, 2, name, "default", 0, kind="cpu") for name in SPEED])]


def test_a_new_cache_loads_the_saved_fit_and_predicts_the_same(db_url: str,
                                                               tmp_path: Path) -> None:
    store = open_store(db_url)
    seed(store, SPEED, training_problems())
    first = ModelCache(store, directory=tmp_path)
    fitted = first.model("cpu")
    assert (first.fits, first.loads) == (1, 0)
    later = ModelCache(store, directory=tmp_path)  # what a new process starts with
    assert predictions(later.model("cpu")) == predictions(fitted)
    assert (later.fits, later.loads) == (0, 1)


def test_a_store_grown_past_the_refit_rule_is_fitted_anew(db_url: str, tmp_path: Path) -> None:
    store = open_store(db_url)
    problems = training_problems()
    seed(store, SPEED, problems[:10])
    ModelCache(store, directory=tmp_path).model("cpu")
    seed(store, SPEED, problems[10:])  # 8 rows more on 40: 20%, past REFIT_GROWTH
    later = ModelCache(store, directory=tmp_path)
    later.model("cpu")
    assert (later.fits, later.loads) == (1, 0)
    again = ModelCache(store, directory=tmp_path)  # ... and that fit was saved in turn
    again.model("cpu")
    assert (again.fits, again.loads) == (0, 1)


def test_a_store_with_other_measurements_under_the_same_url_is_fitted_anew(
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = open_store(url)
    seed(store, SPEED, training_problems())
    ModelCache(store, directory=tmp_path / "models").model("cpu")
    close_stores()
    (tmp_path / "store.db").unlink()
    rebuilt = open_store(url)  # same URL and size, other times
    seed(rebuilt, {name: 2 * speed for name, speed in SPEED.items()}, training_problems())
    later = ModelCache(rebuilt, directory=tmp_path / "models")
    later.model("cpu")
    assert (later.fits, later.loads) == (1, 0)


def test_an_unreadable_file_is_ignored_and_replaced(db_url: str, tmp_path: Path) -> None:
    store = open_store(db_url)
    seed(store, SPEED, training_problems())
    path = model_files.path_for(tmp_path, store.url, "cpu")
    path.write_bytes(b"not a pickle")
    cache = ModelCache(store, directory=tmp_path)
    assert cache.model("cpu") is not None
    assert (cache.fits, cache.loads) == (1, 0)
    assert model_files.load(tmp_path, store.url, "cpu") is not None


def test_a_small_store_saves_nothing_and_no_directory_means_no_files(db_url: str,
                                                                      tmp_path: Path) -> None:
    store = open_store(db_url)
    seed(store, SPEED, training_problems()[:2])  # below MIN_ROWS: no model
    assert ModelCache(store, directory=tmp_path / "a").model("cpu") is None
    assert not (tmp_path / "a").exists()
    seed(store, SPEED, [small_problem(n=n, c=8, k=8) for n in range(1, 12)])
    assert ModelCache(store).model("cpu") is not None  # the default: nothing on disk
    assert not list(tmp_path.rglob("*.pkl"))


def test_tuning_in_a_second_process_loads_the_first_ones_fit(db_url: str,
                                                            tmp_path: Path) -> None:
    store = open_store(db_url)
    seed(store, SPEED, training_problems())
    # Each process asks the store's model cache for a model, as a fast-mode find does.
    script = ("import sys; from db.engine import open_store; from tuner.model import "
              "model_cache; c = model_cache(open_store(sys.argv[1])); c.model('cpu'); "
              "print(c.fits, c.loads)")
    root = Path(__file__).resolve().parents[2]
    runs = [subprocess.run([sys.executable, "-c", script, db_url], capture_output=True,
                           text=True, cwd=root, check=True).stdout.split() for _ in range(2)]
    assert runs == [["1", "0"], ["0", "1"]]


class _OtherCode(M.CostModel):
    """A model of other code: unpickles as a CostModel, predicts nothing."""

    def __init__(self) -> None:
        pass

    def predict(self, samples: object) -> list[M.Prediction]:
        raise ValueError("X has 52 features, but the model is expecting 51")


# Bug: a file of other model code that still unpickled (here one fitted on another feature
# layout: an upgrade under a running process saved its old fit under the new code's key)
# was loaded, and every find of every new process failed in predict until a refit.
def test_a_saved_fit_that_cannot_predict_is_fitted_anew(db_url: str, tmp_path: Path) -> None:
    store = open_store(db_url)
    seed(store, SPEED, training_problems())
    first = ModelCache(store, directory=tmp_path)
    model = first.model("cpu")
    assert model is not None
    path = model_files.path_for(tmp_path, store.url, "cpu")
    saved = model_files.load(tmp_path, store.url, "cpu")
    assert saved is not None

    broken = model_files.SavedModel(saved.rows, saved.digest, _OtherCode())  # type: ignore[arg-type]
    path.write_bytes(pickle.dumps(broken))
    later = ModelCache(store, directory=tmp_path)
    assert later.model("cpu") is not None and (later.fits, later.loads) == (1, 0)


def test_a_failed_save_leaves_no_temporary(db_url: str, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # Bug: a save that failed (a full disk, the file's path a directory, a pickling error)
    # left its temporary behind, one more per process.
    store = open_store(db_url)
    seed(store, SPEED, training_problems())
    models = tmp_path / "models"
    model_files.path_for(models, store.url, "cpu").mkdir(parents=True)  # where the file goes
    assert ModelCache(store, directory=models).model("cpu") is not None
    assert [p.name for p in models.iterdir()] == [
        model_files.path_for(models, store.url, "cpu").name]

    def full(*_args: object, **_kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    other = tmp_path / "other"
    monkeypatch.setattr(model_files.pickle, "dump", full)
    assert ModelCache(store, directory=other).model("cpu") is not None
    assert list(other.iterdir()) == []


def test_no_home_directory_turns_saving_off(monkeypatch: pytest.MonkeyPatch) -> None:
    # Bug: with no $HOME and a UID without a passwd entry (a container's), platformdirs
    # raised and a heuristic find crashed with it.
    import platformdirs

    def homeless(*_args: object, **_kwargs: object) -> str:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.delenv(model_files.ENV_DIR, raising=False)
    monkeypatch.setattr(platformdirs, "user_cache_dir", homeless)
    assert model_files.model_dir() is None


def _fitted_by_old_code(db_url: str, directory: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    """A seeded store whose fit "old code" saved in `directory`; code_version stays patched."""
    store = open_store(db_url)
    seed(store, SPEED, training_problems())
    monkeypatch.setattr(model_files, "code_version", lambda: "old code")
    ModelCache(store, directory=directory).model("cpu")
    return store


def test_a_save_removes_the_fits_of_other_model_code(db_url: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # Bug: every upgrade (or source edit) left one more file per store and kind, 0.2-2 MB,
    # which no process of the new code ever read or removed.
    store = _fitted_by_old_code(db_url, tmp_path, monkeypatch)
    other_store = model_files.path_for(tmp_path, "sqlite:///elsewhere.db", "cpu")
    other_store.write_bytes(b"another store's fit")
    monkeypatch.setattr(model_files, "code_version", lambda: "new code")
    ModelCache(store, directory=tmp_path).model("cpu")
    assert sorted(p.name for p in tmp_path.glob("model-*")) == sorted(
        [model_files.path_for(tmp_path, store.url, "cpu").name, other_store.name])


def test_a_crashed_save_s_old_temporary_is_swept(db_url: str, tmp_path: Path) -> None:
    # Bug: a process killed mid-save left model-<key>.pkl<random> for good, one per crash.
    import os
    import time

    store = open_store(db_url)
    seed(store, SPEED, training_problems())
    models = tmp_path / "models"
    models.mkdir()
    stale, fresh = models / "model-a-b.pklx1y2", models / "model-c-d.pklz3w4"
    for path in (stale, fresh):
        path.write_bytes(b"partial")
    old = time.time() - 2 * model_files.STALE_S
    os.utime(stale, (old, old))
    assert ModelCache(store, directory=models).model("cpu") is not None
    assert not stale.exists() and fresh.exists()


class _Planted:
    """A pickle that, loaded, leaves a file: what a planted model file could run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[Path]]:
        # The Path itself, not its str: Python 3.10's Path.touch needs a Path's _accessor.
        return (Path.touch, (self.marker,))


def _plant(directory: Path, marker: Path) -> Path:
    directory.mkdir(exist_ok=True)
    path = model_files.path_for(directory, "sqlite:///x.db", "cpu")
    path.write_bytes(pickle.dumps(_Planted(marker)))
    return path


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX owners and modes")
@pytest.mark.parametrize("where", ["directory", "file", "owner"])
def test_a_model_file_others_could_write_is_not_loaded(tmp_path: Path, where: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # Bug (a review of security): load unpickled any file at its path, so a pickle planted
    # in a shared CONVTUNE_MODEL_DIR ran its code in a server at an anonymous heuristic find.
    directory, marker = tmp_path / "models", tmp_path / "ran"
    path = _plant(directory, marker)
    directory.chmod(0o700)
    path.chmod(0o644)
    assert model_files.load(directory, "sqlite:///x.db", "cpu") is None
    assert marker.exists()  # an own file of an own directory is loaded: the check is it
    marker.unlink()
    if where == "directory":
        directory.chmod(0o777)
    elif where == "file":
        path.chmod(0o666)
    else:
        uid = model_files.os.geteuid() + 1
        monkeypatch.setattr(model_files.os, "geteuid", lambda: uid)
        model_files._warned.add(directory)  # its warning said once already
    assert model_files.load(directory, "sqlite:///x.db", "cpu") is None
    assert not marker.exists()


def test_an_untrusted_directory_keeps_no_fit_and_says_so(db_url: str, tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    store = open_store(db_url)
    seed(store, SPEED, training_problems())
    ModelCache(store, directory=shared).model("cpu")
    assert list(shared.iterdir()) == []
    assert "writable by nobody else" in caplog.text
    fresh = tmp_path / "new" / "models"
    ModelCache(store, directory=fresh).model("cpu")
    assert fresh.stat().st_mode & 0o777 == 0o700 and len(list(fresh.iterdir())) == 1


def test_fits_unused_for_long_are_swept_and_a_load_renews_one(db_url: str,
                                                              tmp_path: Path) -> None:
    # Bug (a review of resource lifetimes): a fit stayed for good after its store was
    # deleted (a temporary store per run: 0.9 MB each in the user's cache, forever).
    import os
    import time

    store = open_store(db_url)
    seed(store, SPEED, training_problems())
    models = tmp_path / "models"
    ModelCache(store, directory=models).model("cpu")
    (ours,) = models.iterdir()
    gone, recent = models / "model-aaaa-bbbb.pkl", models / "model-cccc-dddd.pkl"
    for path in (gone, recent):
        path.write_bytes(b"a fit of a store deleted since")
    old, older = (time.time() - model_files.UNUSED_S * f for f in (0.5, 2.0))
    os.utime(recent, (old, old))
    for path in (gone, ours):
        os.utime(path, (older, older))
    later = ModelCache(store, directory=models)
    assert later.model("cpu") is not None and later.loads == 1
    assert time.time() - ours.stat().st_mtime < 60  # the load renewed it
    model_files._sweep(models)  # what the next save does first
    assert sorted(p.name for p in models.iterdir()) == sorted([ours.name, recent.name])



def test_a_load_renews_its_file_where_utime_takes_no_descriptor(
        db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Bug (the review of the session's changes): os.utime(fd) raises TypeError on Windows,
    # which the load took for an unreadable file: every process fitted again.
    import os
    import time

    store = open_store(db_url)
    seed(store, SPEED, training_problems())
    models = tmp_path / "models"
    ModelCache(store, directory=models).model("cpu")
    (saved,) = models.iterdir()
    old = time.time() - 1000
    os.utime(saved, (old, old))
    monkeypatch.setattr(model_files.os, "supports_fd", os.supports_fd - {os.utime})
    real = os.utime

    def by_name_only(path: object, *args: object, **kwargs: object) -> None:
        if isinstance(path, int):
            raise TypeError("utime: fd not supported here")
        real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(model_files.os, "utime", by_name_only)
    later = ModelCache(store, directory=models)
    assert later.model("cpu") is not None and later.loads == 1
    assert time.time() - saved.stat().st_mtime < 60


# Mutation gap: only a directory or file writable by everyone (0o777, 0o666) was refused;
# one writable by the group, which the README's "writable by nobody else" excludes as well,
# could have been trusted unseen.
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX owners and modes")
@pytest.mark.parametrize("where", ["directory", "file"])
def test_a_model_file_the_group_could_write_is_not_loaded(tmp_path: Path, where: str) -> None:
    directory, marker = tmp_path / "models", tmp_path / "ran"
    path = _plant(directory, marker)
    directory.chmod(0o770 if where == "directory" else 0o700)
    path.chmod(0o664 if where == "file" else 0o644)
    model_files._warned.add(directory)
    assert model_files.load(directory, "sqlite:///x.db", "cpu") is None
    assert not marker.exists()


# Mutation gap: a fit saved by other model code was shown to be removed by the next save,
# never to be refused by a load: a file name that left out the code's digest went unseen,
# and a process of new code would serve the old code's fit.
def test_a_fit_of_other_model_code_is_not_loaded(db_url: str, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    store = _fitted_by_old_code(db_url, tmp_path, monkeypatch)
    monkeypatch.setattr(model_files, "code_version", lambda: "new code")
    later = ModelCache(store, directory=tmp_path)
    assert later.model("cpu") is not None and (later.fits, later.loads) == (1, 0)


# Mutation gap: "$CONVTUNE_MODEL_DIR empty: off" (README) was never set empty by a test; read
# as a path, "" is the working directory, and fits would be kept there.
def test_an_empty_model_dir_turns_keeping_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(model_files.ENV_DIR, "")
    assert model_files.model_dir() is None
    monkeypatch.setenv(model_files.ENV_DIR, "/tmp/elsewhere")
    assert model_files.model_dir() == Path("/tmp/elsewhere")


# Mutation gap: a file that unpickles to something other than a SavedModel (another layout
# of the file, or a planted tuple) was never loaded by a test; without the layout check the
# cache read its fields and the find crashed instead of fitting anew.
@pytest.mark.parametrize("planted", [("rows", 48, "digest"), {"rows": 48, "digest": "x"},
                                     "SavedModel"])
def test_a_file_of_another_layout_is_not_loaded(db_url: str, tmp_path: Path,
                                                planted: object) -> None:
    store = open_store(db_url)
    seed(store, SPEED, training_problems())
    path = model_files.path_for(tmp_path, store.url, "cpu")
    if planted == "SavedModel":  # the right class, fields of the wrong types
        planted = model_files.SavedModel("48", 7, None)  # type: ignore[arg-type]
    path.write_bytes(pickle.dumps(planted))
    assert model_files.load(tmp_path, store.url, "cpu") is None
    cache = ModelCache(store, directory=tmp_path)
    assert cache.model("cpu") is not None and (cache.fits, cache.loads) == (1, 0)


# Mutation gap: the sweep was checked only in multiples of UNUSED_S, so its age could shrink
# (to a day, an hour) unseen: a fit last used a week ago is kept, one unused for 31 days not.
def test_a_fit_used_last_week_is_kept_and_one_unused_for_a_month_swept(tmp_path: Path) -> None:
    import os
    import time

    week, month = tmp_path / "model-aaaa-bbbb.pkl", tmp_path / "model-cccc-dddd.pkl"
    for path, days in ((week, 7), (month, 31)):
        path.write_bytes(b"a fit")
        then = time.time() - days * 86400
        os.utime(path, (then, then))
    model_files._sweep(tmp_path)
    assert week.exists() and not month.exists()
