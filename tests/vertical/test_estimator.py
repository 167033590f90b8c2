"""The single-process estimators as scikit-learn estimators: the common
checks (all four), sample weights, minimum leaf weight."""
import warnings

import numpy as np
import pytest
from sklearn.datasets import make_classification, make_regression
from sklearn.exceptions import NotFittedError
from sklearn.utils.estimator_checks import check_estimator, check_sample_weight_equivalence_on_dense_data

from fedforest import BoostClassifier, BoostRegressor, ForestClassifier, ForestRegressor
from fedforest.errors import InputError

# the one common check the forests do not pass, as scikit-learn's own forests: a
# bootstrap sample of n rows is drawn from the row count, so repeating a row
# instead of weighting it changes every later draw (it holds without bootstrap,
# see test_weights_equal_repeated_rows_without_bootstrap)
FOREST_FAILS = {"check_sample_weight_equivalence_on_dense_data":
                "bootstrap draws depend on the number of rows, as in scikit-learn's forests"}
# boosting draws no bootstrap: a row of weight k grows the trees of k copies of it
# (tests/vertical/test_boost.py), so every check holds
EXPECTED_FAILED = {ForestClassifier: FOREST_FAILS, ForestRegressor: FOREST_FAILS,
                   BoostClassifier: {}, BoostRegressor: {}}


@pytest.mark.parametrize("Est", [ForestClassifier, ForestRegressor, BoostClassifier, BoostRegressor])
def test_scikit_learn_common_checks(Est):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = check_estimator(Est(n_estimators=5, random_state=0, n_jobs=1), on_fail=None,
                                  expected_failed_checks=EXPECTED_FAILED[Est])
    failed = [(r["check_name"], str(r["exception"])[:300]) for r in results if r["status"] == "failed"]
    assert not failed
    assert len(results) > 50
    xfailed = {r["check_name"] for r in results if r["status"] == "xfail"}
    assert xfailed == set(EXPECTED_FAILED[Est])


@pytest.mark.parametrize("Est", [ForestClassifier, ForestRegressor])
@pytest.mark.parametrize("method", ["exact", "hist"])
def test_weights_equal_repeated_rows_without_bootstrap(Est, method):
    check_sample_weight_equivalence_on_dense_data(
        Est.__name__, Est(n_estimators=3, bootstrap=False, max_features=None, split_method=method,
                          random_state=0))


def test_zero_weight_rows_take_no_part():
    X, y = make_classification(300, 5, random_state=0)
    w = np.ones(300)
    w[::3] = 0
    keep = w > 0
    params = dict(n_estimators=4, bootstrap=False, max_features=None, random_state=0)
    a = ForestClassifier(**params).fit(X, y, sample_weight=w)
    b = ForestClassifier(**params).fit(X[keep], y[keep])
    np.testing.assert_array_equal(a.predict_proba(X), b.predict_proba(X))
    # and with bootstrap, weights change the forest
    c = ForestClassifier(n_estimators=4, random_state=0).fit(X, y)
    d = ForestClassifier(n_estimators=4, random_state=0).fit(X, y, sample_weight=w)
    assert not np.array_equal(c.predict_proba(X), d.predict_proba(X))


@pytest.mark.parametrize("weights,match", [
    (np.full(10, -1.0), "non-negative"), (np.zeros(10), "weights are zero"),
    (np.ones(9), "one weight per row"), (np.array([np.nan] + [1.0] * 9), "finite"),
])
def test_bad_sample_weights(weights, match):
    X, y = make_regression(10, 3, random_state=0)
    with pytest.raises(InputError, match=f"^sample_weight: .*{match}"):
        ForestRegressor(n_estimators=2).fit(X, y, sample_weight=weights)


def test_min_weight_fraction_leaf_bounds_every_leaf():
    X, y = make_classification(500, 6, random_state=2)
    w = np.random.default_rng(0).uniform(0.5, 2.0, 500)
    m = ForestClassifier(n_estimators=5, min_weight_fraction_leaf=0.05, random_state=0).fit(
        X, y, sample_weight=w)
    for t in m.estimators_:
        leaves = t["children_left"] < 0
        total = t["weighted_n_node_samples"][0]
        assert np.all(t["weighted_n_node_samples"][leaves] >= 0.05 * total - 1e-9)
    deep = ForestClassifier(n_estimators=5, random_state=0).fit(X, y, sample_weight=w)
    assert sum(t["children_left"].size for t in deep.estimators_) > \
        2 * sum(t["children_left"].size for t in m.estimators_)
    with pytest.raises(InputError, match="min_weight_fraction_leaf"):
        ForestClassifier(min_weight_fraction_leaf=0.6).fit(X, y)


def test_not_fitted_is_both_error_types():
    with pytest.raises(NotFittedError):
        ForestClassifier().predict(np.zeros((2, 2)))
    with pytest.raises(InputError, match="not fitted"):
        ForestRegressor().feature_importances_
