"""FedXGBllr's CNN: gradients against finite differences, a reference forward
pass, training, and the FedAvg step."""
import numpy as np
import pytest

from fedforest.horizontal.fedxgbllr import cnn


def _data(task, n=12, K=3, T=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, K * T))
    y = {"binary": rng.integers(0, 2, n).astype(float), "multiclass": rng.integers(0, 4, n),
         "regression": rng.normal(size=n)}[task]
    out = 4 if task == "multiclass" else 1
    params = cnn.init_params(T, K, out, channels=5, seed=seed)
    params["b"] = rng.normal(0, 0.1, params["b"].shape)  # non-zero biases exercise their gradients
    params["c"] = rng.normal(0, 0.1, params["c"].shape)
    return params, X, y


@pytest.mark.parametrize("task", ["binary", "multiclass", "regression"])
def test_gradients_match_finite_differences(task):
    params, X, y = _data(task)
    _, grads = cnn.loss_and_grad(params, X, y, task)
    eps = 1e-6
    for name, value in params.items():
        num = np.zeros_like(value)
        for idx in np.ndindex(value.shape):
            old = value[idx]
            value[idx] = old + eps
            up, _ = cnn.loss_and_grad(params, X, y, task)
            value[idx] = old - eps
            down, _ = cnn.loss_and_grad(params, X, y, task)
            value[idx] = old
            num[idx] = (up - down) / (2 * eps)
        assert np.allclose(grads[name], num, rtol=1e-5, atol=1e-7), name


def test_forward_matches_a_plain_loop():
    params, X, _ = _data("multiclass", n=3)
    out, _ = cnn.forward(params, X)
    W, b, V, c = params["W"], params["b"], params["V"], params["c"]
    T = W.shape[1]
    K = X.shape[1] // T
    for n in range(X.shape[0]):
        conv = np.array([[max(0.0, float(W[ch] @ X[n, k * T:(k + 1) * T] + b[ch])) for k in range(K)]
                         for ch in range(W.shape[0])])
        assert np.allclose(out[n], V @ conv.ravel() + c)


def test_training_fits_a_weighted_sum_of_trees():
    """Targets that are a weighted sum of tree outputs are learnt."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(256, 2 * 5))
    y = X @ rng.normal(size=10)
    params = cnn.init_params(5, 2, 1, channels=16, seed=0)
    before = np.mean((cnn.predict(params, X, "regression") - y) ** 2)
    params, last = cnn.train_local(params, X, y, "regression", epochs=60, batch_size=32, lr=1e-2)
    after = np.mean((cnn.predict(params, X, "regression") - y) ** 2)
    assert after < 0.05 * before and abs(last - after) < 0.5 * before


def test_batch_larger_than_rows_uses_all_rows():
    params, X, y = _data("binary", n=5)
    new, _ = cnn.train_local(params, X, y, "binary", epochs=1, batch_size=64)
    assert not np.allclose(new["W"], params["W"])
