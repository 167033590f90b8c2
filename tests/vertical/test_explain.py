"""Looking into vertical models: importances per rank, a row's decision path."""
import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import make_classification
from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

from fedforest import ForestClassifier
from fedforest.cli import main
from fedforest.errors import InputError
from fedforest.jobs import run_vertical
from fedforest.tree.importance import feature_importances
from fedforest.vertical import explain

from _util import party_frames


def _sk_trees(forest):
    return [{"children_left": e.tree_.children_left, "children_right": e.tree_.children_right,
             "feature": e.tree_.feature, "impurity": e.tree_.impurity,
             "weighted_n_node_samples": e.tree_.weighted_n_node_samples} for e in forest.estimators_]


@pytest.mark.parametrize("Forest", [RandomForestClassifier, RandomForestRegressor])
def test_feature_importances_as_scikit_learn_computes_them(Forest):
    X, y = make_classification(400, 8, n_informative=4, random_state=3)
    # stumps (max_depth 1 with min_samples_split above the rows of some bootstrap) included
    forest = Forest(n_estimators=12, max_depth=4, random_state=0).fit(X, y)
    got = feature_importances(_sk_trees(forest), X.shape[1])
    np.testing.assert_allclose(got, forest.feature_importances_, rtol=1e-12, atol=1e-15)


def test_feature_importances_skip_trees_without_a_split():
    stump = {"children_left": np.array([-1]), "children_right": np.array([-1]),
             "feature": np.array([-2]), "impurity": np.array([0.5]),
             "weighted_n_node_samples": np.array([10.0])}
    split = {"children_left": np.array([1, -1, -1]), "children_right": np.array([2, -1, -1]),
             "feature": np.array([1, -2, -2]), "impurity": np.array([0.5, 0.0, 0.0]),
             "weighted_n_node_samples": np.array([10.0, 5.0, 5.0])}
    np.testing.assert_array_equal(feature_importances([stump, split], 3), [0.0, 1.0, 0.0])
    np.testing.assert_array_equal(feature_importances([stump], 3), [0.0, 0.0, 0.0])


def test_estimator_importances_find_the_informative_columns():
    # shuffle=False: the first 3 columns are informative, the last 5 pure noise
    X, y = make_classification(1500, 8, n_informative=3, n_redundant=0, shuffle=False, random_state=1)
    imp = ForestClassifier(n_estimators=30, random_state=0).fit(X, y).feature_importances_
    assert imp.sum() == pytest.approx(1.0)
    assert np.all(imp >= 0)
    assert imp[:3].min() > imp[3:].max()


def _job(tmp_path, n=300):
    X, y = make_classification(n, 6, n_informative=4, random_state=5)
    X = np.round(X, 2)
    groups = [[0, 1, 2], [3, 4], [5]]
    frames = party_frames(X, y, groups, label_party=1)
    frames[2]["f5"] = np.where(X[:, 5] > 0, "high", "low")     # a text column
    model_dir = str(tmp_path / "model")
    params = dict(n_estimators=5, random_state=2, max_depth=4, split_method="exact")
    run_vertical("train", frames, task="classification", label_column="y", model_dir=model_dir, **params)
    return X, y, frames, groups, model_dir, params


def test_each_rank_knows_its_share_and_the_parties_together_the_forest(tmp_path):
    X, y, frames, groups, model_dir, params = _job(tmp_path)
    Xc = X.copy()
    Xc[:, 5] = (X[:, 5] <= 0).astype(float)     # "high" -> 0, "low" -> 1 (sorted codes)
    order = [c for g in groups for c in g]
    est = ForestClassifier(**params).fit(Xc[:, order], y)
    ref = est.feature_importances_
    offsets = np.cumsum([0] + [len(g) for g in groups])
    totals = explain.master_party_totals(f"{model_dir}/master")
    for p in range(3):
        cols, imp = explain.party_feature_importances(f"{model_dir}/party-{p + 1}")
        assert cols == [f"f{c}" for c in groups[p]]
        np.testing.assert_allclose(imp, ref[offsets[p]:offsets[p + 1]], rtol=1e-12, atol=1e-15)
        assert totals[p] == pytest.approx(imp.sum(), rel=1e-12)
    assert totals.sum() == pytest.approx(1.0)


def test_explain_command_on_vertical_folders(tmp_path, capsys):
    _, _, _, _, model_dir, _ = _job(tmp_path)
    assert main(["explain", "--model-dir", f"{model_dir}/party-1"]) == 0
    out = capsys.readouterr().out
    assert "party 1" in out and "f0" in out and "master" not in out
    assert main(["explain", "--model-dir", model_dir, "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "party 1: " in out and "party 3 (" in out
    assert main(["explain", "--model-dir", model_dir, "--row", "0"]) == 2
    assert "--explain-row" in capsys.readouterr().err


def test_explain_row_prints_each_partys_conditions_and_the_owners(tmp_path, capsys):
    X, y, frames, groups, model_dir, params = _job(tmp_path)
    test = [f.drop(columns=["y"]) if "y" in f else f for f in frames]
    row = 17
    full = run_vertical("predict", test, model_dir=model_dir, output=str(tmp_path / "all.csv"))
    capsys.readouterr()
    out = run_vertical("predict", test, model_dir=model_dir, output=str(tmp_path / "one.csv"),
                       explain_row=f"row-{row:05d}", explain_trees=5)
    printed = capsys.readouterr().out
    np.testing.assert_allclose(out["values"][0], full["values"][row], atol=1e-12)
    assert out["n_rows"] == 1 and not any(out["rows_lost"].values())   # one row on every party
    assert pd.read_csv(tmp_path / "one.csv")["id"].tolist() == [f"row-{row:05d}"]
    assert len(out["path"]) == 1 + 5
    # every split on the master's paths shows up as one condition line of its owner, which holds
    party_lines = [ln for ln in printed.splitlines() if ln.startswith("[party ") and ", node " in ln]
    n_splits = sum(line.count(" -> ") for line in out["path"][1:])
    assert len(party_lines) == n_splits > 0
    for line in party_lines:
        rank = int(line[len("[party "):line.index("]")])
        cond = line.split(": ", 1)[1]
        name, rest = cond.split(" = ", 1) if " = " in cond else (cond.split(" is ")[0], None)
        assert int(name[1:]) in groups[rank - 1]
        if rest is not None and " in {" in rest:      # the text column: the categories on the row's side
            label, shown = rest.split(": ", 1)
            assert shown.startswith(f"{name} in {{") and label.strip("'") in shown
        elif rest is not None:
            value, op, thr = rest.split()
            assert float(value) == X[row, int(name[1:])]
            assert (float(value) <= float(thr)) == (op == "<=")


def test_party_path_lines_name_categories_and_missing_values():
    tree = {"children_left": np.array([1, -1, 3, -1, -1]), "children_right": np.array([2, -1, 4, -1, -1]),
            "feature": np.array([1, -2, 0, -2, -2]), "threshold": np.array([0.5, np.nan, 2.5, np.nan, np.nan])}
    x = np.array([np.nan, 1.0])
    lines = explain.party_path_lines([tree], [(0, 0, 2), (0, 2, 3)], x, ["size", "colour"],
                                     {"colour": ["blue", "red"]})
    assert lines == ["tree 0, node 0: colour = 'red': colour in {red}",
                     "tree 0, node 2: size is missing -> left"]
    three = explain.party_path_lines([tree], [(0, 0, 1)], np.array([0.0, 0.0]), ["size", "colour"],
                                     {"colour": ["blue", "green", "red"]})
    assert three == ["tree 0, node 0: colour = 'blue': colour in {blue}"]
    tree2 = dict(tree, threshold=np.array([1.5, np.nan, 2.5, np.nan, np.nan]))
    both = explain.party_path_lines([tree2], [(0, 0, 1)], np.array([0.0, 1.0]), ["size", "colour"],
                                    {"colour": ["blue", "green", "red"]})
    assert both == ["tree 0, node 0: colour = 'green': colour in {blue, green}"]
    with pytest.raises(InputError, match="not this party's split"):
        explain.party_path_lines([tree], [(0, 1, 2)], x, ["size", "colour"], {})


def test_explain_row_unknown_id_is_refused(tmp_path):
    _, _, frames, _, model_dir, _ = _job(tmp_path)
    test = [f.drop(columns=["y"]) if "y" in f else f for f in frames]
    with pytest.raises(Exception, match="explain_row"):
        run_vertical("predict", test, model_dir=model_dir, output=str(tmp_path / "x.csv"),
                     explain_row="no-such-row")
    assert not (tmp_path / "x.csv").exists()


def test_vertical_folder_without_importances_is_a_clear_error(tmp_path):
    _, _, _, _, model_dir, _ = _job(tmp_path)
    import glob
    for path in glob.glob(f"{model_dir}/party-2/trees/*.npz"):
        with np.load(path) as z:
            arrays = {k: z[k] for k in z.files if k != "importance"}
        np.savez(path, **arrays)
    with pytest.raises(InputError, match="did not record importances"):
        explain.party_feature_importances(f"{model_dir}/party-2")


def _plain_and_encrypted(tmp_path, n, seed, **params):
    """The same forest trained with plain and with Paillier labels (party 2
    holds the label) into ``tmp_path/plain`` and ``tmp_path/enc``; the frames."""
    X, y = make_classification(n, 6, n_informative=4, random_state=seed)
    frames = party_frames(np.round(X, 2), y, [[0, 1, 2], [3, 4, 5]], label_party=1)
    opts = dict(task="classification", label_column="y", **params)
    run_vertical("train", frames, model_dir=str(tmp_path / "plain"), **opts)
    run_vertical("train", frames, model_dir=str(tmp_path / "enc"), label_privacy="paillier", key_length=512,
                 insecure_key=True, **opts)
    return frames


def test_encrypted_labels_keep_the_importances_with_the_label_holder(tmp_path):
    """With label_privacy = "paillier" the importance shares are label
    statistics: the label holder holds every split's (its own columns' and each
    party's total, the same as the plain model's), the other party counts its
    splits, and the master points to the label holder."""
    _plain_and_encrypted(tmp_path, n=300, seed=2, n_estimators=4, max_depth=4, random_state=3)
    text = explain.describe(str(tmp_path / "enc"))
    assert "held by the label holder (party 2)" in text
    assert "splits on its own columns" in text
    plain_cols, plain_imp = explain.party_feature_importances(str(tmp_path / "plain" / "party-2"))
    enc_cols, enc_imp = explain.party_feature_importances(str(tmp_path / "enc" / "party-2"))
    np.testing.assert_array_equal(enc_imp, plain_imp)
    np.testing.assert_allclose(explain.holder_party_totals(str(tmp_path / "enc" / "party-2")),
                               explain.master_party_totals(str(tmp_path / "plain" / "master")), rtol=1e-12)
    _, counts = explain.split_counts(str(tmp_path / "enc" / "party-1"))
    _, plain_counts = explain.split_counts(str(tmp_path / "plain" / "party-1"))
    np.testing.assert_array_equal(counts, plain_counts)
    assert counts.sum() > 0


def test_explain_row_with_encrypted_labels_prints_the_leaf_values_at_the_label_holder(tmp_path, capsys):
    """With label_privacy = "paillier" the master prints the owners along the
    paths and no value; the label holder prints each tree's leaf value, which
    is the plain model's."""
    frames = _plain_and_encrypted(tmp_path, n=200, seed=5, n_estimators=3, max_depth=3, random_state=2)
    test = [f.drop(columns=["y"]) if "y" in f else f for f in frames]
    printed = {}
    for name in ("plain", "enc"):
        capsys.readouterr()
        out = run_vertical("predict", test, model_dir=str(tmp_path / name), output=str(tmp_path / f"{name}.csv"),
                           explain_row="row-00007", explain_trees=3, result_party=2)
        printed[name] = capsys.readouterr().out
        if name == "enc":
            assert "values" not in out and all("value at the label holder" in line for line in out["path"][1:])
    holder = [ln for ln in printed["enc"].splitlines() if ln.startswith("[party 2] tree ") and ": leaf " in ln]
    assert len(holder) == 3
    plain_leaves = [ln.split("leaf ")[-1] for ln in printed["plain"].splitlines() if ln.startswith("tree ")]
    for line, plain in zip(holder, plain_leaves):
        leaf, values = line.split(": leaf ")[1].split(" value ")
        assert plain.startswith(leaf + " [")
        shown = [float(v.split(": ")[1]) for v in plain[len(leaf) + 2:-1].split(", ")]
        np.testing.assert_allclose([float(v) for v in values.split(", ")], shown, atol=5e-4)
    assert pd.read_csv(tmp_path / "enc.csv").equals(pd.read_csv(tmp_path / "plain.csv"))
