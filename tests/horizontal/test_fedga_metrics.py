"""FedGA-Tree's scores: the positive class of binary F1 (fitness, depth
cross-validation, reported metrics) and the noise scale of the IBM tree."""
import json
import os

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import make_classification
from sklearn.metrics import f1_score

from _util import client_files
from fedforest.cli import main
from fedforest.data.validation import positive_class_index
from fedforest.errors import InputError
from fedforest.federation.metrics import compute_metrics
from fedforest.horizontal.fedga import baselines, ga
from fedforest.jobs import run_horizontal

FAST = dict(generations=3, random_state=0, min_depth=2, max_depth=4, cv_folds=3)


# ---------------------------------------------------------------------------
# Choosing the positive class
# ---------------------------------------------------------------------------
def test_positive_class_index():
    assert positive_class_index(["a", "b"], counts=[10, 90]) == 0          # minority sorts first
    assert positive_class_index(["a", "b"], counts=[90, 10]) == 1
    assert positive_class_index(["a", "b"], counts=[50, 50]) == 1          # tie: the last, as evaluate
    assert positive_class_index(["a", "b"]) == 1
    assert positive_class_index(["a", "b"], "a", counts=[90, 10]) == 0    # a setting wins
    assert positive_class_index(["0", "1"], 0) == 0                        # compared as text
    assert positive_class_index(["0", "1"], 1.0) == 1
    with pytest.raises(InputError, match=r"positive_class: 'c' is not a class; classes: \['a', 'b'\]"):
        positive_class_index(["a", "b"], "c")


def test_f1_of_the_positive_code_is_sklearns():
    rng = np.random.default_rng(0)
    y, pred = rng.integers(0, 2, 80), rng.integers(0, 2, 80)
    for pos in (0, 1):
        assert ga.f1_score(y, pred, 2, pos) == pytest.approx(f1_score(y, pred, pos_label=pos))
    assert ga.f1_score(y, pred, 2) == pytest.approx(f1_score(y, pred, pos_label=1))


# ---------------------------------------------------------------------------
# Runs on an imbalanced table whose majority class sorts second
# ---------------------------------------------------------------------------
def _imbalanced(folder, n=900, n_clients=3, names=("b", "a"), classes=2, weights=(0.8,)):
    """Class 0 of make_classification (about 80 % of the rows) is ``names[0]``."""
    X, y = make_classification(n, 5, n_informative=3, n_classes=classes, weights=list(weights), flip_y=0.05,
                               random_state=1)
    df = pd.DataFrame(X, columns=[f"x{j}" for j in range(5)])
    df["y"] = np.array(names)[y]
    return client_files(df, folder, n_clients)


def _run(paths, tests, folder, mode="fedga", **opts):
    base = FAST if mode == "fedga" else {k: v for k, v in FAST.items() if k != "generations"}
    if mode == "ibm_tree":
        base = {"random_state": 0, "max_depth": 3}
    return run_horizontal(paths, mode=mode, task="classification", label_column="y", test_data=tests,
                          model_dir=str(folder / mode), **dict(base, **opts))


@pytest.fixture
def positives(monkeypatch):
    """The class codes every binary F1 of the job scored (fitness, CV and metrics)."""
    seen = []
    real = ga.f1_score

    def spy(y, pred, n_classes, positive=1):
        if n_classes == 2:
            seen.append(positive)
        return real(y, pred, n_classes, positive)
    monkeypatch.setattr(ga, "f1_score", spy)
    return seen


def _client_f1(summary, tests, rank, folder, positive_class):
    """F1 of ``positive_class`` of client ``rank``'s saved model on its test file,
    through predict and the evaluate command's metrics."""
    out = str(folder / f"p{rank}.csv")
    assert main(["predict", "--mode", summary["mode"], "--model-dir", summary["model_dirs"][rank],
                 "--data", tests[rank - 1], "--output", out]) == 0
    pred = pd.read_csv(out)["prediction"].astype(str).to_numpy()
    truth = pd.read_csv(tests[rank - 1])["y"].astype(str).to_numpy()
    return compute_metrics(truth, pred, "classification", positive_class=positive_class)["f1_binary"]


def test_default_positive_class_is_the_pooled_minority(tmp_path, positives):
    paths, tests = _imbalanced(tmp_path)
    counts = pd.concat(pd.read_csv(p) for p in paths)["y"].value_counts()
    assert counts["b"] > 3 * counts["a"]                           # the majority sorts second
    s = _run(paths, tests, tmp_path)
    assert s["positive_class"] == "a" and s["positive_class_from"] == "minority of the pooled label counts"
    assert s["label_counts"] == {"a": int(counts["a"]), "b": int(counts["b"])}
    assert len(positives) > 50 and set(positives) == {0}           # fitness, CV and metrics: class "a"
    for r in (1, 2, 3):
        assert s["test_metrics"][r]["f1"] == pytest.approx(_client_f1(s, tests, r, tmp_path, "a"))
    assert s["rounds"] == FAST["generations"] + 3                  # the label counts are part of the set-up


def test_baselines_score_the_same_positive_class(tmp_path, positives):
    paths, tests = _imbalanced(tmp_path)
    for mode in ("fedga_local", "fedga_central", "ibm_tree"):
        s = _run(paths, tests, tmp_path, mode=mode)
        assert s["positive_class"] == "a", mode
        assert s["test_metrics"][1]["f1"] == pytest.approx(_client_f1(s, tests, 1, tmp_path, "a")), mode
    assert set(positives) == {0}


def test_explicit_positive_class_is_honoured(tmp_path, positives):
    paths, tests = _imbalanced(tmp_path)
    s = _run(paths, tests, tmp_path, positive_class="b")
    assert s["positive_class"] == "b" and s["positive_class_from"] == "setting" and "label_counts" not in s
    assert set(positives) == {1}
    assert s["test_metrics"][2]["f1"] == pytest.approx(_client_f1(s, tests, 2, tmp_path, "b"))


def test_numeric_labels_and_a_numeric_setting(tmp_path, positives):
    paths, tests = _imbalanced(tmp_path, names=(1, 0))             # majority 1, minority 0
    s = _run(paths, tests, tmp_path)
    assert s["positive_class"] == "0" and set(positives) == {0}
    positives.clear()
    s = _run(paths, tests, tmp_path, positive_class=1, overwrite=True)
    assert s["positive_class"] == "1" and set(positives) == {1}


@pytest.mark.parametrize("mode", ["fedga", "fedga_local", "ibm_tree"])
def test_positive_class_not_a_label_is_refused_before_any_work(tmp_path, positives, mode):
    paths, tests = _imbalanced(tmp_path)
    with pytest.raises(InputError, match=r"positive_class: 'yes' is not a class; classes: \['a', 'b'\]"):
        _run(paths, tests, tmp_path, mode=mode, positive_class="yes")
    assert positives == [] and not os.path.exists(tmp_path / mode)


def test_positive_class_needs_two_classes(tmp_path, positives):
    paths, tests = _imbalanced(tmp_path, names=("a", "b", "c"), classes=3, weights=(0.6, 0.3))
    with pytest.raises(InputError, match=r"positive_class: applies to two classes; the clients' labels hold 3"):
        _run(paths, tests, tmp_path, positive_class="a")
    assert not os.path.exists(tmp_path / "fedga")
    with pytest.raises(InputError, match=r"positive_class: applies to classification with two classes"):
        run_horizontal(paths, mode="fedga", task="regression", label_column="x0", positive_class="a",
                       model_dir=str(tmp_path / "m"))
    s = _run(paths, tests, tmp_path)                                # multiclass: macro-F1, no positive class
    assert "positive_class" not in s and positives == []


# ---------------------------------------------------------------------------
# refit: the last step keeps the tree it scored, or refits the structure on all rows
# ---------------------------------------------------------------------------
def _saved_trees(summary):
    return {r: json.load(open(os.path.join(d, "model.json")))["tree"] for r, d in summary["model_dirs"].items()}


def test_refit_false_keeps_the_tree_fitted_on_the_fit_rows(tmp_path):
    paths, tests = _imbalanced(tmp_path)
    kept = _run(paths, tests, tmp_path, refit=False)
    kept_trees = _saved_trees(kept)
    refit = _run(paths, tests, tmp_path, overwrite=True)            # the default: refit on all rows
    refit_trees = _saved_trees(refit)
    assert kept["refit"] is False and refit["refit"] is True
    assert kept["population"] == refit["population"]                # the same search; only the last step differs
    assert kept["chosen_structure"] == refit["chosen_structure"]
    for r, path in enumerate(paths, start=1):
        counts = pd.read_csv(path)["y"].value_counts()
        fit_rows = sum(int(round(0.8 * n)) for n in counts)        # the stratified fit rows (train_ratio 0.8)
        assert kept_trees[r]["n_node_samples"][0] == fit_rows < counts.sum()
        assert refit_trees[r]["n_node_samples"][0] == counts.sum()
        assert kept["population_fitness"][r] == refit["population_fitness"][r]
    with pytest.raises(InputError, match=r"refit: must be true or false, got 'no'"):
        _run(paths, tests, tmp_path, refit="no", overwrite=True)


# ---------------------------------------------------------------------------
# The IBM tree's noise: sensitivity = number of columns per level
# ---------------------------------------------------------------------------
def test_ibm_scale_counts_every_columns_histogram():
    assert baselines.ibm_scale(6, 10, 1.0) == 70.0                 # 7 levels x 10 columns / epsilon
    assert baselines.ibm_scale(3, 1, 2.0) == 2.0
    assert baselines.ibm_scale(0, 36, 0.5) == 72.0


def test_ibm_run_adds_noise_of_the_real_sensitivity(tmp_path, monkeypatch):
    paths, tests = _imbalanced(tmp_path)                           # 5 columns
    used = []
    real = baselines.noisy_counts

    def spy(rng, X, y, tree, frontier, n_codes, n_classes_, scale, shares):
        used.append((scale, shares, X.shape[1]))
        return real(rng, X, y, tree, frontier, n_codes, n_classes_, scale, shares)
    monkeypatch.setattr(baselines, "noisy_counts", spy)
    s = _run(paths, tests, tmp_path, mode="ibm_tree", max_depth=3, epsilon=2.0)
    expect = (3 + 1) * 5 / 2.0                                     # 10, where (depth + 1) / epsilon gave 2
    assert s["noise_scale"] == expect and s["noise_sensitivity_per_level"] == 5
    assert s["epsilon_per_level"] == pytest.approx(0.5)
    assert used and {u[0] for u in used} == {expect} and {u[1:] for u in used} == {(3, 5)}


# ---------------------------------------------------------------------------
# A client checks the positive class the server sends, and the setting
# ---------------------------------------------------------------------------
def test_client_refuses_a_positive_code_out_of_range(tmp_path):
    from test_hostile_server import at, put, refused
    refused(tmp_path, at("positive_class", put("positive", 2)), "positive", mode="fedga", generations=2,
            max_depth=3, min_depth=1, cv_folds=2, population_size=4)


def test_client_refuses_another_positive_class_setting(tmp_path):
    from test_hostile_server import at, put, refused
    refused(tmp_path, at("setup", put("positive_class", "no")), "positive_class", error="InputError",
            mode="fedga_local", cv_folds=2, max_depth=3, positive_class="yes")


# ---------------------------------------------------------------------------
# Delta (Eq. 3) beside the change of the mean F1 and the share of clients improved
# ---------------------------------------------------------------------------
def _figures(fed, local, higher_is_better=True):
    """The three figures from per-client scores, by their definitions."""
    ratios = [(f / lo - 1) * 100 for f, lo in zip(fed, local) if lo > 0]
    delta = sum(ratios) / len(ratios) if ratios else None
    change = sum(fed) / len(fed) - sum(local) / len(local)
    better = [(f > lo) if higher_is_better else (f < lo) for f, lo in zip(fed, local)]
    return delta, change, 100 * sum(better) / len(better)


def test_delta_can_rise_while_the_mean_falls_and_is_flagged():
    from fedforest.horizontal.fedga.compare import against_local, describe
    # the pattern of a 5 %-positive set: two clients with a tiny local F1 gain a
    # few hundred percent, the eight others lose a third of theirs
    local = [0.02, 0.03] + [0.10] * 8
    fed = [0.08, 0.10] + [0.066] * 8
    c = against_local(fed, local)
    delta, change, improved = _figures(fed, local)
    assert c["delta_percent"] == pytest.approx(delta) and delta > 0
    assert c["mean_change"] == pytest.approx(change) and change < 0
    assert c["mean_local"] == pytest.approx(np.mean(local)) and c["mean_fedga"] == pytest.approx(np.mean(fed))
    assert c["mean_change_percent"] == pytest.approx(change / np.mean(local) * 100)
    assert c["improved_percent"] == improved == 20 and c["worse_percent"] == 80
    assert c["delta_and_mean_disagree"] is True
    text = "\n".join(describe(c, "f1"))
    assert "disagree in sign" in text and "client 1 +300 %" in text and "the mean f1 fell" in text
    # the same direction: no flag; a local F1 of 0 has no ratio and is listed
    c = against_local([0.2, 0.3, 0.1], [0.1, 0.3, 0.0])
    assert c["delta_percent"] == pytest.approx(50.0) and c["clients_without_delta"] == [3]
    assert c["client_delta_percent"] == {1: pytest.approx(100.0), 2: pytest.approx(0.0), 3: None}
    assert c["delta_and_mean_disagree"] is False and c["improved_percent"] == pytest.approx(200 / 3)
    # regression (MSE, lower is better): both figures negative when it improves
    c = against_local([9.0, 1.0], [10.0, 4.0], higher_is_better=False)
    assert c["delta_percent"] == pytest.approx(-42.5) and c["mean_change"] == pytest.approx(-2.0)
    assert c["improved_percent"] == 100 and not c["delta_and_mean_disagree"]
    with pytest.raises(ValueError):
        against_local([0.1], [0.1, 0.2])


def test_imbalanced_set_reports_the_three_figures_consistently(tmp_path, monkeypatch):
    """A lending_club-like table (5 % positives, 10 clients of ~150 training
    rows): the summary and the log give Delta, the change of the mean F1 and
    the share of clients improved; the test recomputes them from each
    client's F1, scored independently (predict, then evaluate's metrics) on the
    fedga models and on the models of mode fedga_local."""
    from fedforest.horizontal.fedga import roles
    lines = []
    monkeypatch.setattr(roles, "log", lambda cfg, text: lines.append(text))
    paths, tests = _imbalanced(tmp_path, n=2000, n_clients=10, weights=(0.95,))
    truth = pd.concat(pd.read_csv(p) for p in paths)["y"]
    assert truth.value_counts(normalize=True)["a"] < 0.08                 # "a": the rare positive class
    opts = dict(binning=True, max_depth=5)
    s = _run(paths, tests, tmp_path, **opts)
    local_run = _run(paths, tests, tmp_path, mode="fedga_local", **opts)
    assert s["positive_class"] == local_run["positive_class"] == "a"
    ranks = range(1, 11)
    fed = [_client_f1(s, tests, r, tmp_path, "a") for r in ranks]
    local = [_client_f1(local_run, tests, r, tmp_path, "a") for r in ranks]
    # fedga's local trees are mode fedga_local's trees: the same scores
    assert [s["local_test_metrics"][r]["f1"] for r in ranks] == pytest.approx(local)
    assert [s["test_metrics"][r]["f1"] for r in ranks] == pytest.approx(fed)
    assert s["local_depths"] == local_run["depths"]
    assert s["local_decision_nodes"] == local_run["decision_nodes"]
    v = s["vs_local"]
    assert v["scored_on"] == "test" and v["metric"] == "f1"
    delta, change, improved = _figures(fed, local)
    if delta is None:
        assert v["delta_percent"] is None
    else:
        assert v["delta_percent"] == pytest.approx(delta)
    assert v["mean_change"] == pytest.approx(change)
    assert v["mean_fedga"] == pytest.approx(s["test_f1"]) and v["mean_local"] == pytest.approx(np.mean(local))
    assert v["improved_percent"] == pytest.approx(improved)
    assert v["clients_without_delta"] == [r for r, lo in zip(ranks, local) if lo == 0]
    assert v["delta_and_mean_disagree"] == (delta is not None and delta * change < 0)
    text = "\n".join(lines)
    assert f"change {change:+.4g}" in text and f"({improved:.0f} %)" in text
    assert ("undefined" if delta is None else f"{delta:+.2f} %") in text
    assert ("disagree in sign" in text) == v["delta_and_mean_disagree"]
