"""The label holder's privacy audit (:mod:`fedforest.vertical.audit`) and
``label_holder_first_trees``.

* The audit's figure equals the attacks of ``experiments/bench_leakage.py``
  (its own code: the declined-leaf union and the co-occurrence clustering)
  run on the row sets a passive party rebuilds from what it received in a
  recorded job, forest and boosting, with and without
  ``label_holder_first_trees``;
* it is in the run summary and the master's and the label holder's
  manifests of every encrypted job (two fractions at the master, every
  figure at the label holder), "not computed" for regression, absent with
  plain labels;
* ``label_holder_first_trees = k``: the first k trees split on the label
  holder's columns alone, the other parties receive nothing of them but
  their shape at the commit (they store no split), the trees are the plain
  mode's with the same k, the model predicts; a hostile master that asks a
  passive party for such a tree's sums is refused; the setting is checked
  before any work.
"""
import json
import os
import sys

import numpy as np
import pandas as pd
import pytest

from fedforest.demo import make_demo
from fedforest.errors import InputError, RemoteError
from fedforest.jobs import run_job
from fedforest.tree.format import LEAF, NOT_OWNED
from fedforest.vertical import audit as A
from fedforest.vertical import model_files, tree_grower

from _util import ROOT, assert_same_trees, complete_trees, make_table, party_frames

sys.path.insert(0, os.path.join(ROOT, "experiments"))
import bench_leakage as BL  # noqa: E402

KEY = dict(key_length=512, insecure_key=True)
JOBS = {"forest": dict(mode="vertical", n_estimators=6),
        "boosting": dict(mode="vertical_boost", n_estimators=4, max_depth=4)}
DEPTH = {"forest": None, "boosting": 4}    # the depth the attack's declined rule reads


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo's training files (party 1 holds the labels) and the labels in row order."""
    folder = tmp_path_factory.mktemp("demo")
    make_demo(str(folder))
    files = [str(folder / f"train-party{p}.csv") for p in (1, 2)]
    return files, pd.read_csv(files[0])["diagnosis"].astype(str).to_numpy()


def _train(files, folder, job, **extra):
    options = dict(task="classification", id_column="id", label_column="diagnosis", label_privacy="paillier",
                   random_state=0, n_jobs=1, model_dir=str(folder), **KEY)
    options.update(JOBS[job], **extra)
    with BL.Recorder() as rec:
        summary = run_job("train", files, **options)
    return rec, summary


def _manifest(folder, rank):
    with open(os.path.join(model_files.party_dir(str(folder), rank), "manifest.json")) as fh:
        return json.load(fh)


@pytest.mark.parametrize("first", [0, 2])
@pytest.mark.parametrize("job", sorted(JOBS))
def test_audit_equals_the_attack_on_the_passive_view(demo, tmp_path, job, first):
    files, y = demo
    rec, summary = _train(files, tmp_path / "m", job, label_holder_first_trees=first)
    # the bench's own attacks on what the passive party (rank 2) received and opened
    views = BL.build_view(rec.events, 2, 1, {r - 1: nb for r, (_, nb) in rec.bins.items()})
    seen = [v for v in views if v.n_read]
    n_trees = JOBS[job]["n_estimators"]
    assert len(seen) == n_trees - first        # it sees no row set of the label holder's own trees
    union, _ = BL.declined_leaf_union(views, y, DEPTH[job])
    cluster = BL.cooccurrence_clustering(views, y)
    held = _manifest(tmp_path / "m", 1)[A.AUDIT]
    assert held["trees_audited"] == n_trees - first and held["rows"] == y.size == held["clustering_rows"]
    assert held["declined_leaf_union_fraction"] == pytest.approx(union, abs=1e-12)
    assert held["cooccurrence_clustering_fraction"] == pytest.approx(cluster, abs=2.0 / y.size)
    got = summary[A.AUDIT]
    assert got["passive_labels_recovered_fraction"] == pytest.approx(max(union, cluster), abs=2.0 / y.size)
    assert got["majority_baseline_fraction"] == pytest.approx(np.mean(y == "benign"))
    assert got["label_holder_first_trees"] == first
    # the comparison can tell an audit of fewer trees: the attack on the first tree alone differs
    assert BL.declined_leaf_union(seen[:1], y, DEPTH[job])[0] != union or \
        BL.cooccurrence_clustering(seen[:1], y) != cluster


def test_audit_in_summary_and_manifests_not_in_plain_mode(demo, tmp_path):
    files, y = demo
    _, summary = _train(files, tmp_path / "enc", "forest", n_estimators=3)
    master, holder, passive = (_manifest(tmp_path / "enc", r) for r in (0, 1, 2))
    # the master learns two fractions (and the setting it knows), the label holder keeps every figure
    assert set(summary[A.AUDIT]) == {"passive_labels_recovered_fraction", "majority_baseline_fraction",
                                     "label_holder_first_trees"}
    assert master[A.AUDIT] == summary[A.AUDIT] and master["complete"] and master["n_trees"] == 3
    assert {k: holder[A.AUDIT][k] for k in A.TOLD} == {k: summary[A.AUDIT][k] for k in A.TOLD}
    assert holder[A.AUDIT]["trees_audited"] == 3
    assert A.AUDIT not in passive
    # the model reads back and predicts as before
    out = str(tmp_path / "pred.csv")
    run_job("predict", [pd.read_csv(f).drop(columns="diagnosis", errors="ignore") for f in files],
            mode="vertical", id_column="id", model_dir=str(tmp_path / "enc"), output=out)
    assert len(pd.read_csv(out)) == y.size
    # plain labels: the master knows the labels already, no audit
    plain = run_job("train", files, mode="vertical", task="classification", id_column="id",
                    label_column="diagnosis", label_privacy="plain", n_estimators=3, random_state=0,
                    model_dir=str(tmp_path / "plain"))
    assert A.AUDIT not in plain
    assert all(A.AUDIT not in _manifest(tmp_path / "plain", r) for r in (0, 1, 2))


def test_audit_not_computed_for_regression(tmp_path):
    X, y = make_table("regression", 1, 5, 120, 4, 0.0)
    frames = party_frames(X, y, [[0, 1], [2, 3]], label_party=0)
    summary = run_job("train", frames, mode="vertical", task="regression", label_column="y",
                      label_privacy="paillier", n_estimators=2, max_depth=3, random_state=0,
                      model_dir=str(tmp_path / "m"), **KEY)
    assert summary[A.AUDIT]["note"] == A.NOT_COMPUTED
    assert summary[A.AUDIT]["passive_labels_recovered_fraction"] is None
    assert _manifest(tmp_path / "m", 1)[A.AUDIT] == {"note": A.NOT_COMPUTED}


# -- label_holder_first_trees -------------------------------------------------
GROUPS = [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
LABEL_RANK = 2


def _three_parties():
    X, y = make_table("classification", 2, 7, 200, 9, 0.05)
    return party_frames(X, y, GROUPS, label_party=LABEL_RANK - 1)


def test_first_trees_are_the_label_holders(tmp_path):
    frames = _three_parties()
    opts = dict(mode="vertical", task="classification", label_column="y", n_estimators=5, max_depth=4,
                random_state=3, label_holder_first_trees=2, n_jobs=1, **KEY)
    with BL.Recorder() as rec:
        summary = run_job("train", frames, label_privacy="paillier", model_dir=str(tmp_path / "enc"), **opts)
    run_job("train", frames, label_privacy="plain", model_dir=str(tmp_path / "plain"), **opts)
    enc = complete_trees(str(tmp_path / "enc"), 3, [0, 3, 6, 9])
    # the same trees as the plain mode with the same setting
    assert_same_trees(enc, complete_trees(str(tmp_path / "plain"), 3, [0, 3, 6, 9]))
    master = model_files.read_trees(model_files.party_dir(str(tmp_path / "enc"), 0), 5)
    lh = LABEL_RANK - 1
    for t, tree in enumerate(master):
        owners = set(tree["owner"][tree["children_left"] >= 0].tolist())
        if t < 2:
            assert owners <= {lh} and tree["children_left"].size > 1, (t, owners)
        else:
            assert owners - {lh}, (t, owners)    # the other parties' columns are back
    for rank in (1, 3):
        stored = model_files.read_trees(model_files.party_dir(str(tmp_path / "enc"), rank), 5)
        for t in range(2):
            # only the shape: no split of its own
            assert np.array_equal(stored[t]["children_left"], master[t]["children_left"])
            assert set(stored[t]["feature"].tolist()) <= {NOT_OWNED, LEAF}
        # nothing of trees 0 and 1 reached it but that shape, at the commit
        for kind, rcv, snd, msg in (e[:4] for e in rec.events if e[0] == "recv"):
            if rcv != rank:
                continue
            for t, sub in BL.sub_messages(msg):
                if t < 2:
                    assert sub.get("op") == "finish" and set(sub) == {"op", "shape_left", "shape_right"}
        assert not [e for e in rec.events if e[0] in ("open", "seal") and e[1] == rank and 0 <= e[4] < 2]
    assert summary[A.AUDIT]["label_holder_first_trees"] == 2
    assert _manifest(tmp_path / "enc", LABEL_RANK)[A.AUDIT]["trees_audited"] == 3
    # the model predicts alike in both modes
    written = []
    for mode in ("plain", "enc"):
        out = str(tmp_path / f"{mode}.csv")
        run_job("predict", [f.drop(columns="y", errors="ignore") for f in frames], mode="vertical",
                model_dir=str(tmp_path / mode), output=out, result_party=LABEL_RANK)
        written.append(pd.read_csv(out))
    assert written[0].equals(written[1])


@pytest.mark.parametrize("privacy", ["paillier", "plain"])
def test_hostile_master_asks_for_a_label_holder_tree(tmp_path, monkeypatch, privacy):
    """A master that ignores the setting asks the other parties about tree 0: refused."""
    monkeypatch.setattr(tree_grower.TreeGrower, "label_holder_first", lambda self, n, party: None)
    with pytest.raises(RemoteError, match=r"tree 0 is one of the first 1 trees \(label_holder_first_trees\)"):
        run_job("train", _three_parties(), mode="vertical_boost", task="classification", label_column="y",
                n_estimators=2, max_depth=3, label_holder_first_trees=1, label_privacy=privacy,
                model_dir=str(tmp_path / "m"), **KEY)


def test_setting_checked_before_work(tmp_path):
    frames = _three_parties()
    for value, match in ((-1, "label_holder_first_trees"), (4, r"label_holder_first_trees: must be at most "
                                                                 r"n_estimators \(3\)"), (1.5, "label_holder_first")):
        with pytest.raises(InputError, match=match):
            run_job("train", frames, mode="vertical", task="classification", label_column="y", n_estimators=3,
                    label_holder_first_trees=value, model_dir=str(tmp_path / "m"))
    assert not (tmp_path / "m").exists()
    # a label holder without feature columns has nothing to split on
    frames[LABEL_RANK - 1] = frames[LABEL_RANK - 1][["id", "y"]]
    with pytest.raises(InputError, match="holds no feature column"):
        run_job("train", frames, mode="vertical", task="classification", label_column="y", n_estimators=3,
                label_holder_first_trees=1, model_dir=str(tmp_path / "m2"))
