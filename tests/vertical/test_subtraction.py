"""Histogram subtraction in the plain histogram search: a larger child's
histograms are its parent's minus its smaller sibling's where that is exact
(integer statistics), so the trees are the ones building every histogram
gives, federated as centralized; the kept histograms stay within their
memory bound."""
import numpy as np
import pytest
from sklearn.datasets import make_classification, make_regression

from fedforest import ForestClassifier, ForestRegressor
from fedforest.jobs import run_vertical
from fedforest.tree import growth
from fedforest.vertical import party_splitter
from fedforest.tree.params import ForestParams, validate

from _util import assert_same_trees, complete_trees, party_frames, random_groups


def _data(task, seed, n=1500, n_features=8):
    if task == "classification":
        X, y = make_classification(n, n_features, n_informative=5, n_classes=3, random_state=seed)
    else:
        X, y = make_regression(n, n_features, n_informative=5, noise=5.0, random_state=seed)
    rng = np.random.default_rng(seed)
    X = np.round(X, 2)
    X[rng.random(X.shape) < 0.05] = np.nan
    return X, y


class Tally:
    """Counts the nodes whose histograms were derived, and the largest kept level."""

    def __init__(self, monkeypatch):
        self.derived = 0
        self.kept_bytes = []    # (bytes kept by one find, in-bag rows of the tree)
        sub, find = party_splitter.PartySplitter._subtraction, party_splitter.PartySplitter.score

        def subtraction(splitter, nodes, starts, ends):
            out = sub(splitter, nodes, starts, ends)
            self.derived += int((out[2] >= 0).sum())
            return out

        def find_(splitter, msg):
            reply = find(splitter, msg)
            t = splitter._tree
            if t.get("hists") is not None:
                _, _, hist, cnt = t["hists"]
                self.kept_bytes.append((hist.nbytes + cnt.nbytes, t["nodes"].rows.size))
            return reply

        monkeypatch.setattr(party_splitter.PartySplitter, "_subtraction", subtraction)
        monkeypatch.setattr(party_splitter.PartySplitter, "score", find_)


def _estimator(task, **params):
    cls = ForestClassifier if task == "classification" else ForestRegressor
    return cls(n_estimators=4, max_depth=8, random_state=5, **params)


@pytest.mark.parametrize("sampling,extra", [("tree", {}), ("node", {"bootstrap": False})])
def test_subtraction_grows_the_trees_of_building_every_histogram(monkeypatch, sampling, extra):
    X, y = _data("classification", 3)
    monkeypatch.setattr(growth, "HIST_CACHE_BYTES_PER_ROW", 10 ** 9)   # every node keeps
    tally = Tally(monkeypatch)
    with_sub = _estimator("classification", feature_sampling=sampling, **extra).fit(X, y)
    assert tally.derived > 50
    monkeypatch.setattr(growth, "HIST_CACHE_BYTES_PER_ROW", 10 ** -9)  # no node keeps
    tally.derived = 0
    without = _estimator("classification", feature_sampling=sampling, **extra).fit(X, y)
    assert tally.derived == 0
    assert_same_trees(with_sub.estimators_, without.estimators_)


@pytest.mark.parametrize("task,extra", [("regression", {}),
                                        ("classification", {"class_weight": "balanced"})])
def test_no_subtraction_where_it_would_round(monkeypatch, task, extra):
    """Sums of fractional statistics round differently as parent minus sibling,
    and a rounding difference can swap tied candidates: such trees build every
    histogram."""
    X, y = _data(task, 3)
    monkeypatch.setattr(growth, "HIST_CACHE_BYTES_PER_ROW", 10 ** 9)
    tally = Tally(monkeypatch)
    _estimator(task, **extra).fit(X, y)
    assert tally.derived == 0 and not tally.kept_bytes


@pytest.mark.parametrize("n_parties,sampling", [(3, "tree"), (2, "node")])
def test_federated_equals_centralized_with_subtraction(tmp_path, monkeypatch, n_parties, sampling):
    monkeypatch.setattr(growth, "HIST_CACHE_BYTES_PER_ROW", 10 ** 9)
    tally = Tally(monkeypatch)
    X, y = _data("classification", 4, n=600)
    groups = random_groups(X.shape[1], n_parties, np.random.default_rng(4))
    order = [c for g in groups for c in g]
    params = dict(n_estimators=4, max_depth=8, random_state=5, feature_sampling=sampling)
    frames = party_frames(X, y, groups, label_party=0)
    run_vertical("train", frames, task="classification", label_column="y",
                 model_dir=str(tmp_path / "m"), **params)
    federated_derived, tally.derived = tally.derived, 0
    est = _estimator("classification", feature_sampling=sampling).fit(X[:, order], y)
    assert federated_derived > 0 and tally.derived > 0
    offsets = np.concatenate(([0], np.cumsum([len(g) for g in groups])))
    assert_same_trees(complete_trees(str(tmp_path / "m"), n_parties, offsets), est.estimators_)


def test_kept_histograms_stay_within_their_bound(monkeypatch):
    X, y = _data("classification", 6, n=6000, n_features=7)
    per_row = 64
    monkeypatch.setattr(growth, "HIST_CACHE_BYTES_PER_ROW", per_row)
    tally = Tally(monkeypatch)
    _estimator("classification", max_features=None).fit(X, y)
    settings = growth.SplitSettings(validate(ForestParams(max_features=None), "classification"),
                                     X.shape[0], True, 3, X.shape[1])
    # 7 features * 256 bins * (3 statistics * 8 + 4) bytes / 64 bytes per row
    assert settings.hist_cache_rows == 784
    assert tally.derived > 0
    assert max(b for b, _ in tally.kept_bytes) > 0
    for kept, rows in tally.kept_bytes:
        assert kept <= per_row * rows


def test_default_bound():
    params = validate(ForestParams(), "classification")
    s = growth.SplitSettings(params, 10 ** 5, True, 2, 20)
    # sqrt(20) = 4 features * 256 bins * (2 * 8 + 4) bytes, at most 2 bytes per row
    assert s.hist_cache_rows == 4 * 256 * 20 // 2
