"""Aggregation on the server: pure functions checked against hand-computed values."""
import numpy as np
import pytest

from fedforest.federation.aggregate import client_metrics, fedavg, in_rank_order, weighted_average


def test_fedavg_weights_by_rows():
    a = {"W": np.ones((2, 2)), "c": np.array([0.0])}
    b = {"W": 3 * np.ones((2, 2)), "c": np.array([4.0])}
    avg = fedavg([a, b], [100, 300])
    assert np.allclose(avg["W"], 2.5) and np.allclose(avg["c"], 3.0)


def test_fedavg_refuses_models_of_different_shape_or_keys():
    with pytest.raises(ValueError):
        fedavg([{"W": np.ones(2)}, {"V": np.ones(2)}], [1, 1])


def test_weighted_average_matches_numpy_and_checks_weights():
    rng = np.random.default_rng(0)
    vals = [rng.normal(size=(3, 4)) for _ in range(5)]
    w = rng.integers(1, 100, size=5)
    assert np.allclose(weighted_average(vals, w), np.average(np.stack(vals), axis=0, weights=w))
    for bad in ([1, 2], [0, 0, 0, 0, 0], [1, -1, 1, 1, 1]):
        with pytest.raises(ValueError):
            weighted_average(vals, bad)


def test_in_rank_order_whatever_the_arrival_order():
    arrived = {3: "c", 1: "a", 2: "b"}
    assert in_rank_order(arrived) == ["a", "b", "c"]


def test_client_metrics_mean_and_weighted_mean():
    per = {1: {"accuracy": 0.5, "f1": 0.4}, 2: {"accuracy": 1.0, "f1": 0.8}}
    assert client_metrics(per) == pytest.approx({"accuracy": 0.75, "f1": 0.6})
    assert client_metrics(per, {1: 3, 2: 1}) == pytest.approx({"accuracy": 0.625, "f1": 0.5})
