"""Checkpoints and --resume (in-process; the mpiexec variant is in test_mpi.py)."""
import logging
import os

import numpy as np
import pytest
from sklearn.datasets import make_regression

from fedforest import ForestRegressor, RemoteError
from fedforest.vertical import model_files as model_io
from fedforest.jobs import run_vertical

from _util import assert_same_trees, complete_trees, party_frames


@pytest.mark.parametrize("random_state", [5, None])
def test_resume_after_party_failure_gives_the_uninterrupted_forest(tmp_path, monkeypatch, random_state):
    X, y = make_regression(250, 6, random_state=1)
    groups = [[0, 1, 2], [3, 4, 5]]
    frames = party_frames(X, y, groups, label_party=1)
    md = str(tmp_path / "model")
    opts = dict(task="regression", label_column="y", model_dir=md, n_estimators=7,
                random_state=random_state, max_depth=4)
    monkeypatch.setenv("FEDFOREST_FAULT_CRASH", "1:4")
    with pytest.raises(RemoteError) as err:
        run_vertical("train", frames, **opts)
    assert err.value.rank == 1
    manifest = model_io.read_manifest(model_io.party_dir(md, 0))
    assert manifest["n_trees"] == 4 and not manifest["complete"]
    monkeypatch.delenv("FEDFOREST_FAULT_CRASH")
    s = run_vertical("train", frames, resume=True, **opts)
    assert s["trees_built"] == 3
    seed = model_io.read_manifest(model_io.party_dir(md, 0))["random_state_used"]
    if random_state is not None:
        assert seed == random_state
    ref = ForestRegressor(n_estimators=7, random_state=seed, max_depth=4).fit(X, y)
    assert_same_trees(complete_trees(md, 2, [0, 3, 6]), ref.estimators_)


@pytest.mark.parametrize("mode", ["vertical", "vertical_boost"])
def test_resume_with_overwrite_and_changed_settings_says_it_restarts(tmp_path, caplog, mode):
    """--resume with overwrite = true and a changed setting starts again from tree
    0, and says so, naming the setting that differs."""
    from fedforest.jobs import run_job
    X, y = make_regression(120, 4, random_state=2)
    frames = party_frames(X, y, [[0, 1], [2, 3]], label_party=1)
    opts = dict(task="regression", label_column="y", model_dir=str(tmp_path / "model"), n_estimators=3,
                random_state=0, progress=False, quiet=False, mode=mode)
    if mode == "vertical_boost":
        opts["label_privacy"] = "plain"
    caplog.set_level(logging.INFO, logger="fedforest")
    run_job("train", frames, max_depth=3, **opts)
    caplog.clear()
    s = run_job("train", frames, max_depth=4, resume=True, overwrite=True, **opts)
    out = caplog.text
    assert s["trees_built"] == 3
    assert "--resume: the model in" in out and "other settings (max_depth 3 -> 4)" in out
    assert "training restarts from tree 0" in out
    # the same settings resume without that line
    caplog.clear()
    s = run_job("train", frames, max_depth=4, resume=True, overwrite=True, **opts)
    assert s["trees_built"] == 0 and "restarts from tree 0" not in caplog.text


def test_the_master_writes_a_batch_of_trees_with_one_manifest(tmp_path, monkeypatch):
    """A checkpoint of many trees is one concurrent write of their files and one
    manifest (the master is then no slower to checkpoint than a party)."""
    from fedforest.vertical import model_files
    manifests, tree_writes = [], []
    write_manifest, write_trees = model_files.write_manifest, model_files.write_trees
    monkeypatch.setattr(model_files, "write_manifest",
                        lambda folder, m: (manifests.append(m["n_trees"]), write_manifest(folder, m)))
    monkeypatch.setattr(model_files, "write_trees",
                        lambda folder, trees: (tree_writes.append(len(trees)), write_trees(folder, trees)))
    arrays = {"feature": np.arange(3, dtype=np.int32)}
    with model_files.CheckpointWriter(str(tmp_path)) as writer:
        writer.submit_batch([(t, arrays, {"n_trees": t + 1}) for t in range(40)])
        writer.submit_batch([(t, arrays, {"n_trees": t + 1}) for t in range(40, 45)])
    assert sum(tree_writes) == 45 and len(tree_writes) <= 2 and manifests[-1] == 45
    assert len(manifests) == len(tree_writes)
    assert sorted(os.listdir(tmp_path / "trees")) == sorted(os.path.basename(model_files._tree_path("", t))
                                                          for t in range(45))
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]
