"""The federated run equals the centralized run of the same algorithm, tree for tree."""
import numpy as np
import pytest

from fedforest import ForestClassifier, ForestRegressor
from fedforest.jobs import run_vertical

from _util import assert_same_trees, complete_trees, make_table, party_frames, random_groups


def _data(task, n_classes, seed, n=300, n_features=9, nan_share=0.05):
    return make_table(task, n_classes, seed, n, n_features, nan_share)


CASES = [
    # task, classes, parties, split method, feature sampling, extra params
    ("classification", 2, 1, "hist", "tree", {}),
    ("classification", 2, 2, "exact", "tree", {"max_depth": 5}),
    ("classification", 3, 3, "hist", "node", {"criterion": "entropy"}),
    ("classification", 4, 4, "exact", "node", {"class_weight": "balanced", "min_samples_leaf": 3}),
    ("classification", 2, 3, "hist", "tree", {"bootstrap": False, "max_features": 0.5}),
    ("regression", 1, 1, "exact", "tree", {}),
    ("regression", 1, 2, "hist", "node", {"max_samples": 0.7, "min_impurity_decrease": 0.5}),
    ("regression", 1, 4, "hist", "tree", {"max_depth": 6, "min_samples_split": 10}),
]


@pytest.mark.parametrize("task,n_classes,n_parties,method,sampling,extra", CASES)
def test_federated_equals_centralized(tmp_path, task, n_classes, n_parties, method, sampling, extra):
    seed = 11 * n_parties + n_classes
    X, y = _data(task, n_classes, seed)
    groups = random_groups(X.shape[1], n_parties, np.random.default_rng(seed))
    order = [c for g in groups for c in g]
    params = dict(n_estimators=6, random_state=seed, split_method=method, feature_sampling=sampling, **extra)
    label_party = n_parties - 1
    frames = party_frames(X, y, groups, label_party=label_party)
    model_dir = str(tmp_path / "model")
    summary = run_vertical("train", frames, task=task, label_column="y", model_dir=model_dir, **params)
    assert summary["trees_built"] == 6
    est = (ForestClassifier if task == "classification" else ForestRegressor)(**params)
    est.fit(X[:, order], y)
    offsets = np.concatenate(([0], np.cumsum([len(g) for g in groups])))
    trees = complete_trees(model_dir, n_parties, offsets)
    assert_same_trees(trees, est.estimators_)
    assert max(len(t["children_left"]) for t in trees) > 3  # the trees actually split

    # prediction: both federated methods equal the centralized estimator
    test_frames = [f.drop(columns=["y"]) if "y" in f else f for f in frames]
    ref = est.predict_proba(X[:, order]) if task == "classification" else est.predict(X[:, order])
    for method_name in ("oneshot", "classical"):
        out = run_vertical("predict", test_frames, model_dir=model_dir, predict_method=method_name,
                           output=str(tmp_path / f"pred-{method_name}.csv"))
        values = out["values"] if task == "classification" else out["values"][:, 0]
        np.testing.assert_allclose(values, ref, rtol=0, atol=1e-12)
        if method_name == "oneshot":
            assert out["rounds"] == 1


def test_rounds_grow_with_depth_not_nodes(tmp_path):
    X, y = _data("classification", 2, 0, n=2000, nan_share=0.0)
    frames = party_frames(X, y, [[0, 1, 2, 3], [4, 5, 6, 7, 8]])
    for depth in (3, 6):
        s = run_vertical("train", frames, task="classification", label_column="y",
                         model_dir=str(tmp_path / f"m{depth}"), n_estimators=3, max_depth=depth,
                         random_state=0)
        assert s["rounds_per_tree"] <= 2 * depth


def test_rows_are_aligned_by_id_not_by_position(tmp_path):
    X, y = _data("classification", 2, 5, nan_share=0.0)
    groups = [[0, 1, 2, 3], [4, 5, 6, 7, 8]]
    frames = party_frames(X, y, groups)
    # party 2 has its rows shuffled plus rows nobody else has; party 1 lacks 10 rows
    extra = frames[1].iloc[:5].copy()
    extra["id"] = [f"only-p2-{i}" for i in range(5)]
    frames[1] = frames[1].sample(frac=1.0, random_state=0)
    frames[1] = __import__("pandas").concat([frames[1], extra])
    keep = np.ones(X.shape[0], dtype=bool)
    keep[:10] = False
    frames[0] = frames[0][keep]
    s = run_vertical("train", frames, task="classification", label_column="y",
                     model_dir=str(tmp_path / "m"), n_estimators=4, random_state=1)
    assert s["n_rows"] == keep.sum()
    assert s["rows_lost"] == {1: 0, 2: 15}
    est = ForestClassifier(n_estimators=4, random_state=1).fit(X[keep], y[keep])
    assert_same_trees(complete_trees(str(tmp_path / "m"), 2, [0, 4, 9]), est.estimators_)


def test_master_full_model_holds_the_complete_trees(tmp_path):
    from fedforest.vertical import model_files as model_io
    X, y = _data("classification", 3, 2, nan_share=0.0)
    groups = [[2, 0, 1], [3, 4], [8, 7, 6, 5]]
    frames = party_frames(X, y, groups, label_party=2)
    md = str(tmp_path / "m")
    run_vertical("train", frames, task="classification", label_column="y", model_dir=md,
                 n_estimators=3, random_state=4, master_full_model=True)
    master = model_io.read_trees(model_io.party_dir(md, 0), 3)
    union = complete_trees(md, 3, [0, 3, 5, 9])
    for m, u in zip(master, union):
        for k in ("feature", "threshold", "missing_left"):
            assert np.array_equal(m[k], u[k], equal_nan=True)
    # without the flag the master stores no split details
    run_vertical("train", frames, task="classification", label_column="y", model_dir=md,
                 n_estimators=3, random_state=4, overwrite=True)
    assert "threshold" not in model_io.read_trees(model_io.party_dir(md, 0), 1)[0]
