"""Client scores in numpy against scikit-learn's."""
import numpy as np
from sklearn.metrics import accuracy_score, f1_score

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
