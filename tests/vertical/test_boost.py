"""Gradient boosting on the vertical grower, in one process: the trees are
XGBoost's (its exact tree method, same settings) to float32 precision, the
settings behave as XGBoost's, and bad settings stop before any work."""
import numpy as np
import pytest
import xgboost as xgb
from sklearn.datasets import make_classification, make_regression

from fedforest import BoostClassifier, BoostRegressor, InputError
from fedforest.vertical.boost import boosting as B
from fedforest.vertical.party_splitter import PartySplitter


def _regression(seed, nan=0.0):
    X, y = make_regression(400, 5, noise=5, random_state=seed)
    X = np.round(X, 3)           # ties between values, as real tables have
    if nan:
        X[np.random.default_rng(seed).random(X.shape) < nan] = np.nan
    return X, y


def _classification(seed, n_classes=2):
    X, y = make_classification(500, 6, n_informative=4, n_classes=n_classes, random_state=seed)
    return np.round(X, 3), y


@pytest.mark.parametrize("lam,mcw,gamma,nan", [(1.0, 1.0, 0.0, 0.0), (5.0, 3.0, 0.0, 0.15),
                                               (0.5, 1.0, 50.0, 0.15), (0.0, 0.0, 0.0, 0.0)])
def test_regression_trees_are_xgboosts_exact_trees(lam, mcw, gamma, nan):
    X, y = _regression(1, nan)
    ours = BoostRegressor(n_estimators=10, max_depth=3, split_method="exact", reg_lambda=lam,
                          min_child_weight=mcw, gamma=gamma, random_state=0).fit(X, y)
    ref = xgb.XGBRegressor(n_estimators=10, max_depth=3, tree_method="exact", reg_lambda=lam,
                           min_child_weight=mcw, gamma=gamma, base_score=float(y.mean())).fit(X, y)
    # XGBoost sums in float32: agreement to that precision means the same splits and leaves
    assert np.max(np.abs(ours.predict(X) - ref.predict(X))) < 1e-6 * np.abs(y).max()
    n_splits = sum(int((t["children_left"] >= 0).sum()) for r in ours.estimators_ for t in r)
    assert n_splits >= 10


@pytest.mark.parametrize("n_classes", [2, 3])
def test_classifier_trees_are_xgboosts_exact_trees(n_classes):
    X, y = _classification(2, n_classes)
    base = float(y.mean()) if n_classes == 2 else 0.0
    ours = BoostClassifier(n_estimators=8, max_depth=3, split_method="exact", random_state=0,
                           base_score=None if n_classes == 2 else 0.0).fit(X, y)
    ref = xgb.XGBClassifier(n_estimators=8, max_depth=3, tree_method="exact", base_score=base).fit(X, y)
    assert np.max(np.abs(ours.predict_proba(X) - ref.predict_proba(X))) < 1e-6
    assert len(ours.estimators_) == 8 and all(len(r) == (1 if n_classes == 2 else 3) for r in ours.estimators_)


def test_histogram_boosting_is_as_accurate_as_xgboost_hist():
    X, y = make_classification(3000, 10, n_informative=6, random_state=0)
    X[::7, 2] = np.nan
    Xa, Xb, ya, yb = X[:2000], X[2000:], y[:2000], y[2000:]
    ours = BoostClassifier(n_estimators=40, max_depth=4, random_state=0).fit(Xa, ya)
    ref = xgb.XGBClassifier(n_estimators=40, max_depth=4, tree_method="hist").fit(Xa, ya)
    acc = (ours.predict(Xb) == yb).mean()
    assert acc >= (ref.predict(Xb) == yb).mean() - 0.02 and acc > 0.85


def test_subsample_and_columns_follow_the_seed_not_the_thread_count():
    X, y = _classification(3, 3)
    kw = dict(n_estimators=6, max_depth=4, subsample=0.7, colsample_bytree=0.5)
    a = BoostClassifier(random_state=5, n_jobs=1, **kw).fit(X, y)
    b = BoostClassifier(random_state=5, n_jobs=2, **kw).fit(X, y)
    c = BoostClassifier(random_state=6, n_jobs=2, **kw).fit(X, y)
    assert np.array_equal(a.decision_function(X), b.decision_function(X))
    assert not np.array_equal(a.decision_function(X), c.decision_function(X))
    full = BoostClassifier(random_state=5, n_estimators=6, max_depth=4).fit(X, y)
    assert not np.array_equal(a.decision_function(X), full.decision_function(X))


def test_early_stopping_keeps_the_rounds_up_to_the_best():
    X, y = _classification(4, 3)
    m = BoostClassifier(n_estimators=400, max_depth=4, learning_rate=0.5, early_stopping_rounds=5,
                        random_state=0).fit(X, y)
    hist = m.evals_result_
    assert len(m.estimators_) == m.best_iteration_ + 1 < 400
    assert len(hist) == m.best_iteration_ + 6           # stopped 5 rounds after the best
    assert hist[m.best_iteration_] == min(hist)


def test_sample_weight_scales_gradients():
    X, y = _regression(5)
    w = np.random.default_rng(0).integers(1, 3, y.shape[0]).astype(float)
    ours = BoostRegressor(n_estimators=5, max_depth=3, split_method="exact", random_state=0).fit(X, y, w)
    ref = xgb.XGBRegressor(n_estimators=5, max_depth=3, tree_method="exact",
                           base_score=float(np.average(y, weights=w))).fit(X, y, sample_weight=w)
    assert np.max(np.abs(ours.predict(X) - ref.predict(X))) < 1e-6 * np.abs(y).max()


@pytest.mark.parametrize("setting,value", [("learning_rate", 0), ("max_depth", 0), ("subsample", 1.5),
                                           ("colsample_bytree", 0), ("reg_lambda", -1), ("gamma", -0.1),
                                           ("min_child_weight", -1), ("max_bins", 256),
                                           ("early_stopping_rounds", 0), ("split_method", "approx"),
                                           ("n_estimators", 0), ("validation_fraction", 1.0),
                                           ("importance_type", "gini")])
def test_bad_settings_stop_before_any_work(setting, value):
    X, y = _regression(6)
    with pytest.raises(InputError, match=setting):
        BoostRegressor(**{setting: value}).fit(X, y)


def test_objectives_gradients_against_finite_differences():
    rng = np.random.default_rng(0)
    y_bin = rng.integers(0, 2, 20).astype(float)
    y_cls = rng.integers(0, 3, 20)
    for objective, y, k in [(B.SQUARED_ERROR, rng.normal(size=20), 1), (B.LOGISTIC, y_bin, 1),
                            (B.SOFTMAX, y_cls, 3)]:
        m = rng.normal(size=(20, k))
        g, _ = B.gradients(objective, y, m, None)
        eps = 1e-6
        for j in range(k):
            up, down = m.copy(), m.copy()
            up[:, j] += eps
            down[:, j] -= eps
            # per-row loss: the squared error's is half the square (XGBoost's convention)
            num = (_row_loss(objective, y, up) - _row_loss(objective, y, down)) / (2 * eps)
            assert np.allclose(g[:, j], num, atol=1e-5)


def _row_loss(objective, y, margin):
    if objective == B.SQUARED_ERROR:
        return 0.5 * (margin[:, 0] - y) ** 2
    if objective == B.LOGISTIC:
        p = B.sigmoid(margin[:, 0])
        return -(y * np.log(p) + (1 - y) * np.log(1 - p))
    return -np.log(B.softmax(margin)[np.arange(y.shape[0]), y])


def _party(n=30):
    from fedforest.tree.growth import SplitSettings
    X = np.random.default_rng(0).normal(size=(n, 3))
    params = B.BoostParams(max_depth=3).grower_params()
    return PartySplitter(X, SplitSettings(params, n, False, 1, 3), B.RoundGradients())


def _begin(n=30, **change):
    msg = {"op": "find", "counts": np.ones(n, dtype=np.uint8), "class_weight": np.empty(0),
           "grad": np.linspace(-1, 1, n), "hess": np.full(n, 0.25), "nodes": np.array([0], dtype=np.int32),
           "fmask": np.ones((1, 3), dtype=np.uint8)}
    msg.update(change)
    return {k: v for k, v in msg.items() if v is not None}


def test_a_party_takes_a_boosting_trees_gradients_from_its_first_message():
    party = _party()
    reply = party.handle(_begin())
    assert np.isfinite(reply["gain"]).all() and reply["gain"][0] > 0


@pytest.mark.parametrize("change,match", [
    ({"grad": None}, "must hold"), ({"hess": np.full(29, 0.25)}, "'hess' must be 30"),
    ({"grad": np.full(30, np.nan)}, "'grad' must be 30 finite"), ({"hess": np.full(30, -1.0)}, "negative"),
    ({"grad": np.ones(30, dtype=np.float32)}, "'grad' must be"),
])
def test_a_party_refuses_bad_gradients(change, match):
    from fedforest.transport.base import ProtocolError
    with pytest.raises(ProtocolError, match=match):
        _party().handle(_begin(**change))


def test_histogram_subtraction_changes_no_tree(monkeypatch):
    """Gradients on the exact grid make parent - sibling histograms bit-equal to
    direct ones: the trees with and without subtraction are identical."""
    X, y = make_classification(4000, 8, n_informative=5, n_classes=3, random_state=4)
    X[::5, 1] = np.nan
    kw = dict(n_estimators=6, max_depth=5, subsample=0.8, random_state=3)
    with_sub = BoostClassifier(**kw).fit(X, y)
    used = []
    orig = PartySplitter._begin

    def no_subtraction(self, msg):
        orig(self, msg)
        used.append(self._tree["subtract"])
        self._tree["subtract"] = False
    monkeypatch.setattr(PartySplitter, "_begin", no_subtraction)
    without = BoostClassifier(**kw).fit(X, y)
    assert used and all(used)
    for ra, rb in zip(with_sub.estimators_, without.estimators_):
        for a, b in zip(ra, rb):
            for key in a:
                np.testing.assert_array_equal(a[key], b[key])
    np.testing.assert_array_equal(with_sub.predict_proba(X), without.predict_proba(X))


IMPORTANCE_CASES = [
    # task, classes, split method, values rounded to (None: float32 values, hardly any tie)
    ("regression", 1, "exact", None),
    ("classification", 2, "exact", None),
    ("classification", 3, "exact", None),
    ("classification", 2, "hist", 1),     # fewer distinct values than bins: every value is a candidate
    ("classification", 3, "hist", 1),
]


@pytest.mark.parametrize("task,n_classes,method,decimals", IMPORTANCE_CASES)
def test_importances_are_xgboosts_for_every_importance_type(task, n_classes, method, decimals):
    """The same settings grow XGBoost's trees (min_child_weight 3 keeps away
    the one-row splits whose gains tie between columns, which XGBoost breaks
    by float32 rounding); then every importance type is XGBoost's
    ``get_score`` per feature and ``feature_importances_`` is XGBoost's."""
    from fedforest.tree.importance import IMPORTANCE_TYPES, boost_split_table, split_scores
    if task == "regression":
        X, y = make_regression(600, 8, n_informative=4, noise=5, random_state=1)
    else:
        X, y = make_classification(600, 8, n_informative=4, n_classes=n_classes, n_clusters_per_class=1,
                                   random_state=1)
    X = np.round(X, decimals) if decimals is not None else X.astype(np.float32).astype(np.float64)
    kw = dict(n_estimators=20, learning_rate=0.3, max_depth=4, min_child_weight=3.0, reg_lambda=1.0)
    base = float(y.mean()) if task == "regression" else 0.5
    if task == "regression":
        ours = BoostRegressor(**kw, split_method=method, base_score=base, random_state=0).fit(X, y)
        ref = xgb.XGBRegressor(**kw, tree_method=method, base_score=base, max_bin=255).fit(X, y)
        assert np.max(np.abs(ours.predict(X) - ref.predict(X))) < 1e-5 * np.abs(y).max()
    else:
        ours = BoostClassifier(**kw, split_method=method, base_score=0.5 if n_classes == 2 else None,
                               random_state=0).fit(X, y)
        ref = xgb.XGBClassifier(**kw, tree_method=method, base_score=base, max_bin=255).fit(X, y)
        assert np.max(np.abs(ours.predict_proba(X) - ref.predict_proba(X))) < 1e-5
    # the default is XGBoost's scikit-learn default, 'gain'
    assert ours.importance_type == "gain" and ref.importance_type in (None, "gain")
    np.testing.assert_allclose(ours.feature_importances_, ref.feature_importances_, rtol=1e-5, atol=1e-7)
    trees = [t for r in ours.estimators_ for t in r]
    for kind in IMPORTANCE_TYPES:
        expected = ref.get_booster().get_score(importance_type=kind)
        got = split_scores(*boost_split_table(trees), X.shape[1], kind)
        assert set(np.flatnonzero(got)) == {int(f[1:]) for f in expected}, kind
        for f, v in expected.items():
            assert got[int(f[1:])] == pytest.approx(v, rel=1e-5), (kind, f)
        ours.set_params(importance_type=kind)
        ref.set_params(importance_type=kind)
        assert ours.feature_importances_.sum() == pytest.approx(1.0)
        np.testing.assert_allclose(ours.feature_importances_, ref.feature_importances_, rtol=1e-5, atol=1e-7,
                                   err_msg=kind)


def test_importance_type_set_after_fit_is_checked():
    X, y = _classification(7)
    m = BoostClassifier(n_estimators=2, max_depth=2, random_state=0).fit(X, y)
    m.importance_type = "split"
    with pytest.raises(InputError, match="importance_type"):
        m.feature_importances_
    with pytest.raises(InputError, match="not fitted"):
        BoostRegressor().feature_importances_


def _leaves(model):
    return [int((t["children_left"] < 0).sum()) for r in model.estimators_ for t in r]


def _xgb_leaves(model):
    df = model.get_booster().trees_to_dataframe()
    return df[df.Feature == "Leaf"].groupby("Tree").size().tolist()


def _on_grid(X):
    """Values on a grid of 0.05: fewer distinct values per column than bins, so
    XGBoost's hist cuts and fedforest's bin edges separate the same values."""
    return np.round(X * 20) / 20


@pytest.mark.parametrize("gamma", [0.0, 1.0, 4.0, 16.0])
def test_gamma_prunes_as_xgboosts_min_split_loss(gamma):
    """gamma is XGBoost's min_split_loss: a split is made when its loss change
    G_l²/(H_l+λ) + G_r²/(H_r+λ) - G²/(H+λ) is at least gamma (not half of it)."""
    X, y = make_classification(500, 6, n_informative=4, random_state=1)
    X = _on_grid(X)
    ours = BoostClassifier(n_estimators=10, max_depth=4, gamma=gamma, random_state=0).fit(X, y)
    ref = xgb.XGBClassifier(n_estimators=10, max_depth=4, gamma=gamma, tree_method="hist",
                            base_score=float(y.mean())).fit(X, y)
    assert _leaves(ours) == _xgb_leaves(ref)
    assert np.max(np.abs(ours.predict_proba(X) - ref.predict_proba(X))) < 1e-6
    Xr, yr = make_regression(400, 5, noise=5, random_state=1)
    Xr, yr = _on_grid(Xr), yr / 20
    ours = BoostRegressor(n_estimators=10, max_depth=4, gamma=gamma, random_state=0).fit(Xr, yr)
    ref = xgb.XGBRegressor(n_estimators=10, max_depth=4, gamma=gamma, tree_method="hist",
                           base_score=float(yr.mean())).fit(Xr, yr)
    assert _leaves(ours) == _xgb_leaves(ref)
    assert np.max(np.abs(ours.predict(Xr) - ref.predict(Xr))) < 1e-6 * np.abs(yr).max()


def test_gamma_prunes_more_as_it_grows():
    X, y = make_classification(500, 6, n_informative=4, random_state=1)
    leaves = [sum(_leaves(BoostClassifier(n_estimators=10, max_depth=4, gamma=g, random_state=0).fit(X, y)))
              for g in (0.0, 1.0, 4.0, 16.0)]
    assert leaves == sorted(leaves, reverse=True) and leaves[0] > 2 * leaves[-1]


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_exact_test_values_on_a_midpoint_go_as_in_xgboost(task):
    """Training values on a grid of 0.1 and test values halfway between them:
    many test values lie exactly on a split's (float32) midpoint, and go right
    as in XGBoost's exact method (x < midpoint goes left)."""
    if task == "classification":
        X, y = make_classification(500, 6, n_informative=4, random_state=1)
        est, ref = BoostClassifier, xgb.XGBClassifier
    else:
        X, y = make_regression(400, 5, noise=5, random_state=1)
        est, ref = BoostRegressor, xgb.XGBRegressor
    X = np.round(X * 10) / 10
    X_test = X[:200] + 0.05
    ours = est(n_estimators=10, max_depth=4, split_method="exact", random_state=0).fit(X, y)
    theirs = ref(n_estimators=10, max_depth=4, tree_method="exact", base_score=float(y.mean())).fit(X, y)
    on_midpoint = 0
    for r in ours.estimators_:
        for t in r:
            for f, thr in zip(t["feature"], t["threshold"]):
                if f >= 0 and np.isfinite(thr):
                    # the float32 midpoint XGBoost compares with: the next float32 above the threshold
                    mid = np.nextafter(np.float32(thr), np.float32(np.inf))
                    on_midpoint += int(np.sum(X_test[:, f].astype(np.float32) == mid))
    assert on_midpoint > 50
    if task == "classification":
        assert np.max(np.abs(ours.predict_proba(X_test) - theirs.predict_proba(X_test))) < 1e-6
    else:
        assert np.max(np.abs(ours.predict(X_test) - theirs.predict(X_test))) < 1e-6 * np.abs(y).max()


def test_a_value_on_the_midpoint_goes_right_in_boosting_and_left_in_the_forest():
    from fedforest import ForestRegressor
    X = np.array([[0.0], [1.0], [2.0], [3.0]])
    y = np.array([0.0, 0.0, 10.0, 10.0])
    boost = BoostRegressor(n_estimators=1, max_depth=1, split_method="exact", min_child_weight=0,
                           learning_rate=1.0, reg_lambda=0.0).fit(X, y)
    forest = ForestRegressor(n_estimators=1, max_depth=1, split_method="exact", bootstrap=False,
                             random_state=0).fit(X, y)
    on = np.array([[1.5]])
    assert boost.predict(on)[0] == pytest.approx(10.0) and boost.predict([[1.49]])[0] == pytest.approx(0.0)
    assert forest.predict(on)[0] == 0.0 and forest.estimators_[0]["threshold"][0] == 1.5


def test_exact_boosting_splits_values_closer_than_scikit_learns_threshold():
    """XGBoost splits any two distinct float32 values; scikit-learn's rule (the
    forest's) keeps values closer than 1e-7 together."""
    X = 0.5 + np.array([[0.0], [1.0], [2.0], [3.0]]) * 2 ** -24    # float32 neighbours, 6e-8 apart
    y = np.array([0.0, 10.0, 10.0, 10.0])
    ours = BoostRegressor(n_estimators=1, max_depth=1, split_method="exact", min_child_weight=0,
                          learning_rate=1.0, reg_lambda=0.0).fit(X, y)
    ref = xgb.XGBRegressor(n_estimators=1, max_depth=1, tree_method="exact", min_child_weight=0,
                           learning_rate=1.0, reg_lambda=0.0, base_score=float(y.mean())).fit(X, y)
    np.testing.assert_allclose(ours.predict(X), ref.predict(X), atol=1e-5)
    np.testing.assert_allclose(ours.predict(X), y, atol=1e-5)


@pytest.mark.parametrize("Est", [BoostClassifier, BoostRegressor])
@pytest.mark.parametrize("method", ["hist", "exact"])
def test_weights_equal_repeated_rows(Est, method):
    """A row of integer weight k grows the trees of k copies of it; weight 0 is
    the row left out (also out of the bin edges and thresholds)."""
    rng = np.random.default_rng(7)
    X = np.round(rng.normal(size=(120, 5)), 2)
    y = rng.integers(0, 3, 120) if Est is BoostClassifier else X[:, 0] * 3 + rng.normal(size=120)
    w = rng.integers(0, 4, 120)
    kw = dict(n_estimators=8, max_depth=3, split_method=method, random_state=0)
    weighted = Est(**kw).fit(X, y, sample_weight=w)
    repeated = Est(**kw).fit(X.repeat(w, axis=0), y.repeat(w))
    out = "predict_proba" if Est is BoostClassifier else "predict"
    np.testing.assert_array_equal(getattr(weighted, out)(X), getattr(repeated, out)(X))
    assert not np.array_equal(getattr(weighted, out)(X), getattr(Est(**kw).fit(X, y), out)(X))


def test_fractional_weights_still_weigh_the_gradients():
    X, y = _regression(5)
    w = np.random.default_rng(0).uniform(0.5, 2.0, y.shape[0])
    ours = BoostRegressor(n_estimators=5, max_depth=3, split_method="exact", random_state=0).fit(X, y, w)
    ref = xgb.XGBRegressor(n_estimators=5, max_depth=3, tree_method="exact",
                           base_score=float(np.average(y, weights=w))).fit(X, y, sample_weight=w)
    assert np.max(np.abs(ours.predict(X) - ref.predict(X))) < 1e-6 * np.abs(y).max()


@pytest.mark.parametrize("base_score", [0.0, 1.0, 2.0, -0.5])
def test_base_score_outside_0_1_is_refused_for_the_logistic_loss(base_score):
    X, y = _classification(8)
    with pytest.raises(InputError, match=r"^base_score: must lie in \(0, 1\) for binary classification"):
        BoostClassifier(n_estimators=2, base_score=base_score).fit(X, y)
    if not 0.0 <= base_score <= 1.0:   # as XGBoost refuses it (it lets the ends 0 and 1 through)
        with pytest.raises(xgb.core.XGBoostError, match="base_score must be in"):
            xgb.XGBClassifier(n_estimators=2, base_score=base_score).fit(X, y)
    # a probability is taken; a regression's or softmax's base_score is a margin
    BoostClassifier(n_estimators=2, base_score=0.3).fit(X, y)
    BoostRegressor(n_estimators=2, base_score=base_score).fit(*_regression(8))
    X3, y3 = _classification(8, 3)
    BoostClassifier(n_estimators=2, base_score=base_score).fit(X3, y3)


@pytest.mark.parametrize("Est", [BoostClassifier, __import__("fedforest").ForestClassifier])
def test_a_classifier_refuses_a_continuous_target(Est):
    X, y = _regression(9)
    with pytest.raises(InputError, match=r"^y: Unknown label type: 'continuous'.*Regressor, a regression"):
        Est(n_estimators=2).fit(X, y)
    # integer-valued floats are classes, as for scikit-learn
    assert Est(n_estimators=2).fit(X, (y > 0).astype(float)).classes_.tolist() == [0.0, 1.0]


def test_predict_before_fit_is_not_fitted_and_regressors_have_no_decision_function():
    from sklearn.exceptions import NotFittedError
    X, y = _classification(10)
    for method in ("predict", "predict_proba", "decision_function"):
        with pytest.raises(NotFittedError):
            getattr(BoostClassifier(), method)(X)
    with pytest.raises(NotFittedError):
        BoostRegressor().predict(X)
    assert not hasattr(BoostRegressor(), "decision_function")
    m = BoostClassifier(n_estimators=3).fit(X, y)
    margin = m.decision_function(X)
    assert margin.shape == (X.shape[0],)
    np.testing.assert_allclose(m.predict_proba(X)[:, 1], 1 / (1 + np.exp(-margin)))
    X3, y3 = _classification(10, 3)
    assert BoostClassifier(n_estimators=3).fit(X3, y3).decision_function(X3).shape == (X3.shape[0], 3)


@pytest.mark.parametrize("subsample", [1.0, 0.7])
def test_training_margins_from_the_growths_leaves_equal_walking_the_trees(monkeypatch, subsample):
    """The single-process loop adds each tree's leaf values to the training
    rows' margins from the leaves the growth put them in (every row in the
    bag) or by walking the tree (rows out of the bag): the same model as
    walking every tree, with missing values and ties at the bin edges."""
    from fedforest.vertical import party_splitter
    rng = np.random.default_rng(3)
    X = np.round(rng.normal(size=(600, 5)), 1)
    X[rng.random(X.shape) < 0.1] = np.nan
    y = (np.nan_to_num(X[:, 0]) + rng.normal(size=600) * 0.5 > 0).astype(int)
    fits = []
    for keep in (True, False):
        monkeypatch.setattr(party_splitter.PartySplitter, "keep_leaf_rows", keep)
        if not keep:      # the loop sets it on its splitter: walk every tree instead
            monkeypatch.setattr(party_splitter.PartySplitter, "keep_leaf_rows",
                                property(lambda self: False, lambda self, v: None))
        m = BoostClassifier(n_estimators=8, max_depth=4, subsample=subsample, random_state=0).fit(X, y)
        fits.append(m.predict_proba(X))
    assert np.array_equal(fits[0], fits[1])


def test_leaf_of_rows_tiles_the_rows_by_leaf():
    from fedforest.tree.growth import Nodes, PARTY_COLUMNS
    counts = np.array([1, 0, 2, 1, 1, 0, 1], dtype=np.int64)
    t = Nodes(counts, PARTY_COLUMNS)
    lefts, _ = t.split(np.array([0]), np.array([1, 0, 1, 0, 1], dtype=np.uint8))
    t.split(np.array([lefts[0] + 1]), np.array([0, 1], dtype=np.uint8))
    got = t.leaf_of_rows(7)
    want = np.full(7, -1)
    for node in range(t.n):
        if t.col["left"][node] < 0:
            s, e = t.col["start"][node], t.col["end"][node]
            want[t.rows[s:e]] = node
    assert got.tolist() == want.tolist() and (got[[1, 5]] == -1).all() and (got[[0, 2, 3, 4, 6]] >= 0).all()
