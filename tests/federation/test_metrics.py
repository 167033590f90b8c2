"""Client scores in numpy against scikit-learn's."""
import numpy as np
import pytest
from sklearn.metrics import accuracy_score, f1_score

from fedforest.errors import InputError
from fedforest.federation.metrics import accuracy, class_scores, macro_f1


def test_accuracy_and_macro_f1_equal_scikit_learn():
    rng = np.random.default_rng(0)
    for n_classes in (2, 3, 7):
        for _ in range(20):
            y = rng.integers(0, n_classes, size=rng.integers(1, 60))
            pred = rng.integers(0, n_classes + 1, size=y.size)   # may predict a class y lacks
            assert accuracy(y, pred) == accuracy_score(y, pred)
            assert np.isclose(macro_f1(y, pred), f1_score(y, pred, average="macro", zero_division=0))


def test_class_scores_use_the_argmax_of_the_distributions():
    proba = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]])
    s = class_scores(np.array([0, 1, 1]), proba)
    assert np.isclose(s["accuracy"], 2 / 3)
    assert np.isclose(s["f1"], f1_score([0, 1, 1], [0, 1, 0], average="macro"))


def _prediction_files(tmp_path, classes=("no", "yes"), n=200, seed=0):
    import pandas as pd
    rng = np.random.default_rng(seed)
    truth = rng.choice(classes, n, p=[0.7] + [0.3 / (len(classes) - 1)] * (len(classes) - 1))
    P = rng.dirichlet(np.ones(len(classes)), n)
    P[np.arange(n), np.searchsorted(classes, truth)] += 0.8       # informative, not perfect
    P /= P.sum(axis=1, keepdims=True)
    ids = [f"{i:04d}" for i in range(n)]
    pred = pd.DataFrame({"id": ids, "prediction": np.array(classes)[P.argmax(axis=1)]})
    for k, c in enumerate(classes):
        pred[f"proba_{c}"] = P[:, k]
    pred.to_csv(tmp_path / "p.csv", index=False)
    pd.DataFrame({"id": ids, "y": truth}).to_csv(tmp_path / "t.csv", index=False)
    return truth, P, pred["prediction"].to_numpy()


def test_evaluate_names_the_positive_class_and_adds_auc_and_log_loss(tmp_path):
    from sklearn import metrics as skm
    from fedforest.federation.metrics import evaluate_files
    truth, P, pred = _prediction_files(tmp_path)
    m = evaluate_files(str(tmp_path / "p.csv"), str(tmp_path / "t.csv"), "id", "y")
    assert m["positive_class"] == "yes"
    assert m["f1_binary"] == pytest.approx(skm.f1_score(truth, pred, pos_label="yes"))
    assert m["roc_auc"] == pytest.approx(skm.roc_auc_score(truth == "yes", P[:, 1]))
    assert m["log_loss"] == pytest.approx(skm.log_loss(truth, P, labels=["no", "yes"]))
    other = evaluate_files(str(tmp_path / "p.csv"), str(tmp_path / "t.csv"), "id", "y", positive_class="no")
    assert other["positive_class"] == "no"
    assert other["f1_binary"] == pytest.approx(skm.f1_score(truth, pred, pos_label="no"))
    assert other["f1_binary"] != pytest.approx(m["f1_binary"])
    assert other["roc_auc"] == pytest.approx(m["roc_auc"])   # AUC of one class is AUC of the other
    with pytest.raises(InputError, match="positive_class: 'maybe' is not a class"):
        evaluate_files(str(tmp_path / "p.csv"), str(tmp_path / "t.csv"), "id", "y", positive_class="maybe")


def test_evaluate_multiclass_auc_and_json_output(tmp_path):
    import json
    from sklearn import metrics as skm
    from fedforest.cli import main
    truth, P, pred = _prediction_files(tmp_path, classes=("a", "b", "c"))
    assert main(["evaluate", "--predictions", str(tmp_path / "p.csv"), "--truth", str(tmp_path / "t.csv"),
                 "--label-column", "y", "--json", str(tmp_path / "m.json")]) == 0
    m = json.loads((tmp_path / "m.json").read_text())
    assert "positive_class" not in m
    assert m["f1_macro"] == pytest.approx(skm.f1_score(truth, pred, average="macro"))
    assert m["roc_auc"] == pytest.approx(skm.roc_auc_score(truth, P, multi_class="ovr", labels=["a", "b", "c"]))
    assert m["log_loss"] == pytest.approx(skm.log_loss(truth, P, labels=["a", "b", "c"]))


def test_evaluate_scores_the_minority_class_by_default(tmp_path):
    """Binary F1 defaults to the minority class of the true labels, also when it sorts first."""
    import pandas as pd
    from sklearn import metrics as skm
    from fedforest.federation.metrics import evaluate_files
    rng = np.random.default_rng(5)
    truth = np.where(rng.random(300) < 0.8, "yes", "no")          # "no" is the minority
    pred = np.where(rng.random(300) < 0.85, truth, np.where(truth == "yes", "no", "yes"))
    ids = [f"r{i}" for i in range(300)]
    pd.DataFrame({"id": ids, "prediction": pred}).to_csv(tmp_path / "p.csv", index=False)
    pd.DataFrame({"id": ids, "y": truth}).to_csv(tmp_path / "t.csv", index=False)
    m = evaluate_files(str(tmp_path / "p.csv"), str(tmp_path / "t.csv"), "id", "y", task="classification")
    assert m["positive_class"] == "no" and m["positive_class_from"] == "minority of the true labels"
    assert m["f1_binary"] == pytest.approx(skm.f1_score(truth, pred, pos_label="no"))
    # a tie goes to the class that sorts last
    tie = np.array(["no", "yes"] * 150)
    pd.DataFrame({"id": ids, "y": tie}).to_csv(tmp_path / "t2.csv", index=False)
    assert evaluate_files(str(tmp_path / "p.csv"), str(tmp_path / "t2.csv"), "id", "y",
                          task="classification")["positive_class"] == "yes"


def test_evaluate_by_position_scores_a_truth_file_without_ids(tmp_path, capsys):
    """A truth file with only the label column is matched row by row (the
    command line's --by-position): the same metrics as matching by ID; files
    of different lengths are refused."""
    import pandas as pd
    from fedforest.cli import main
    from fedforest.federation.metrics import evaluate_files
    _prediction_files(tmp_path)
    by_id = evaluate_files(str(tmp_path / "p.csv"), str(tmp_path / "t.csv"), "id", "y")
    pd.read_csv(tmp_path / "t.csv", dtype=str)[["y"]].to_csv(tmp_path / "labels.csv", index=False)
    with pytest.raises(InputError, match="'id'"):
        evaluate_files(str(tmp_path / "p.csv"), str(tmp_path / "labels.csv"), "id", "y")
    assert evaluate_files(str(tmp_path / "p.csv"), str(tmp_path / "labels.csv"), "id", "y", by_position=True) == by_id
    assert main(["evaluate", "--predictions", str(tmp_path / "p.csv"), "--truth", str(tmp_path / "labels.csv"),
                 "--label-column", "y", "--by-position"]) == 0
    assert f"{by_id['accuracy']:.4f}" in capsys.readouterr().out
    pd.read_csv(tmp_path / "labels.csv").iloc[:-1].to_csv(tmp_path / "short.csv", index=False)
    with pytest.raises(InputError, match="200 rows and .* 199"):
        evaluate_files(str(tmp_path / "p.csv"), str(tmp_path / "short.csv"), "id", "y", by_position=True)
