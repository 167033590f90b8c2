"""Horizontal row partitioning: IID (stratified, equal sizes) and Dirichlet label skew."""
import numpy as np
import pytest

from fedforest.data.partition import dirichlet_partition, iid_partition
from fedforest.errors import InputError


def _labels(n=997, seed=0):
    rng = np.random.default_rng(seed)
    return rng.choice(np.array(["a", "b", "c", "d"]), n, p=[0.5, 0.3, 0.15, 0.05])


def _assert_cover(parts, n):
    allrows = np.concatenate(parts)
    assert allrows.size == n and np.array_equal(np.sort(allrows), np.arange(n))


@pytest.mark.parametrize("k", [1, 2, 5, 10, 50])
def test_iid_equal_sizes_and_stratified(k):
    y = _labels()
    parts = iid_partition(y, k, seed=3)
    _assert_cover(parts, y.size)
    sizes = [p.size for p in parts]
    assert max(sizes) - min(sizes) <= 1
    for c in np.unique(y):
        per = [int((y[p] == c).sum()) for p in parts]
        assert max(per) - min(per) <= 1, (c, per)


def test_iid_seeded():
    y = _labels()
    a, b, c = iid_partition(y, 5, seed=1), iid_partition(y, 5, seed=1), iid_partition(y, 5, seed=2)
    assert all(np.array_equal(u, v) for u, v in zip(a, b))
    assert not all(np.array_equal(u, v) for u, v in zip(a, c))


@pytest.mark.parametrize("k", [2, 10, 50])
def test_dirichlet_min_rows_and_skew(k):
    y = _labels(3000)
    parts = dirichlet_partition(y, k, alpha=0.3, seed=4)
    _assert_cover(parts, y.size)
    assert min(p.size for p in parts) >= 5
    iid = iid_partition(y, k, seed=4)

    def skew(ps):  # mean total-variation distance of client label mixes from the global mix
        glob = np.array([(y == c).mean() for c in np.unique(y)])
        return np.mean([0.5 * np.abs(np.array([(y[p] == c).mean() for c in np.unique(y)]) - glob).sum()
                        for p in ps])

    assert skew(parts) > 3 * skew(iid)


def test_dirichlet_seeded():
    y = _labels()
    a, b = dirichlet_partition(y, 4, seed=9), dirichlet_partition(y, 4, seed=9)
    assert all(np.array_equal(u, v) for u, v in zip(a, b))


@pytest.mark.parametrize("call,match", [
    (lambda y: iid_partition(y, 0), "clients: must be an int >= 1"),
    (lambda y: iid_partition(y, 20), "cannot give 20 clients"),
    (lambda y: dirichlet_partition(y, 3, min_rows=5), "cannot give 3 clients at least 5 rows"),
    (lambda y: dirichlet_partition(np.arange(20) % 2, 2, alpha=0.0), "alpha: must be a number > 0"),
])
def test_bad_partition_input(call, match):
    with pytest.raises(InputError, match=match):
        call(np.arange(12) % 3)


def test_dirichlet_many_clients_few_rows():
    """50 clients on 435 rows (the smallest data set of the experiments): every
    client gets 5 rows even when the Dirichlet shares are very uneven."""
    y = _labels(435, seed=2)
    parts = dirichlet_partition(y, 50, alpha=0.05, seed=1)
    _assert_cover(parts, 435)
    assert min(p.size for p in parts) >= 5
    assert max(p.size for p in parts) > 20  # the skewed shares are still uneven
