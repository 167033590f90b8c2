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


# ---------------------------------------------------------------------------
# The compiled kernels against the numpy reference
# ---------------------------------------------------------------------------
from fedforest.horizontal.fedxgbllr import kernels  # noqa: E402

TASK_CODE = {"binary": kernels.BINARY, "multiclass": kernels.MULTICLASS, "regression": kernels.REGRESSION}


@pytest.mark.parametrize("M,N,L", [(1, 1, 1), (4, 2, 7), (9, 5, 13), (13, 64, 100), (37, 3, 8)])
def test_products_match_numpy(M, N, L):
    """Both products, on shapes that leave every remainder of their row blocks."""
    rng = np.random.default_rng(M * N * L)
    A, B = rng.normal(size=(M, L)), rng.normal(size=(N, L))
    out = np.full((M, N), np.nan)
    kernels.gemm_nt(A, B, out)
    assert np.allclose(out, A @ B.T, rtol=1e-12, atol=1e-12)
    D = rng.normal(size=(M, N))
    out = np.full((N, L), np.nan)
    kernels.gemm_tn(D, A, out)
    assert np.allclose(out, D.T @ A, rtol=1e-12, atol=1e-12)


def _batch(task, n=23, K=3, T=5, C=7, seed=0):
    """A batch whose size leaves remainders everywhere (23 rows, 69 conv rows, 7 channels)."""
    params, X, y = _data(task, n=40, K=K, T=T, seed=seed)
    rng = np.random.default_rng(seed + 1)
    out = 4 if task == "multiclass" else 1
    params = cnn.init_params(T, K, out, channels=C, seed=seed)
    params["b"] = rng.normal(0, 0.3, C)
    params["c"] = rng.normal(0, 0.1, out)
    rows = rng.permutation(X.shape[0])[:n]
    return params, X, np.asarray(y, dtype=np.float64), rows


def _buffers(params, n, K):
    C, T = params["W"].shape
    O = params["V"].shape[0]
    return dict(Xr=np.full((n * K, T), np.nan), Z=np.full((n * K, C), np.nan), dZ=np.full((n * K, C), np.nan),
                out=np.full((n, O), np.nan), d_out=np.full((n, O), np.nan), Vt=np.empty((O, K, C)),
                gVt=np.empty((O, K, C)))


@pytest.mark.parametrize("task", ["binary", "multiclass", "regression"])
def test_kernel_forward_matches_reference(task):
    params, X, y, rows = _batch(task)
    K, C = 3, params["W"].shape[0]
    buf = _buffers(params, rows.size, K)
    kernels.head_by_client(params["V"], K, buf["Vt"])
    kernels.forward_batch(X, rows, K, params["W"], params["b"], buf["Vt"], params["c"], buf["Xr"], buf["Z"],
                          buf["out"])
    out, (_, Z, _) = cnn.forward(params, X[rows])
    assert ((Z > 0).mean() > 0.2) and ((Z <= 0).mean() > 0.2)     # the ReLU is on and off
    assert np.allclose(buf["out"], out, rtol=1e-12, atol=1e-12)
    # conv row i·K + k, channel c  <->  the reference's (i, c, k)
    assert np.allclose(buf["Z"], Z.transpose(0, 2, 1).reshape(rows.size * K, C), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("task", ["binary", "multiclass", "regression"])
def test_kernel_loss_and_gradients_match_reference(task):
    params, X, y, rows = _batch(task)
    K = 3
    buf = _buffers(params, rows.size, K)
    grads = {k: np.full_like(v, np.nan) for k, v in params.items()}
    kernels.head_by_client(params["V"], K, buf["Vt"])
    kernels.forward_batch(X, rows, K, params["W"], params["b"], buf["Vt"], params["c"], buf["Xr"], buf["Z"],
                          buf["out"])
    loss = kernels.loss_batch(buf["out"], y, rows, TASK_CODE[task], buf["d_out"])
    kernels.backward_batch(rows.size, K, buf["Vt"], buf["Xr"], buf["Z"], buf["d_out"], buf["dZ"], grads["W"],
                           grads["b"], grads["V"], buf["gVt"], grads["c"])
    ref_loss, ref = cnn.loss_and_grad(params, X[rows], y[rows], task)
    assert loss == pytest.approx(ref_loss, rel=1e-12)
    for name in params:
        assert np.allclose(grads[name], ref[name], rtol=1e-11, atol=1e-14), name
        assert np.abs(ref[name]).max() > 1e-6, name             # a gradient that can be wrong


def test_kernel_adam_step_matches_reference():
    rng = np.random.default_rng(3)
    params = {"W": rng.normal(size=(6, 5)), "c": rng.normal(size=2)}
    opt = cnn.Adam(params, lr=0.01)
    mine = {k: v.copy() for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in params.items()}
    v = {k: np.zeros_like(v) for k, v in params.items()}
    for t in range(1, 4):
        grads = {k: rng.normal(size=p.shape) for k, p in params.items()}
        opt.step(params, grads)
        for k in mine:
            kernels.adam_update(mine[k], grads[k], m[k], v[k], 0.01, 0.5, 0.999, 1e-8, 1 - 0.5 ** t,
                                1 - 0.999 ** t)
            assert np.allclose(mine[k], params[k], rtol=1e-15, atol=0), (k, t)
            assert np.allclose(m[k], opt.m[k], rtol=1e-15, atol=0) and np.allclose(v[k], opt.v[k], rtol=1e-15,
                                                                                    atol=0)


@pytest.mark.parametrize("task", ["binary", "multiclass", "regression"])
def test_fast_training_equals_the_reference(task):
    """The compiled epochs against the numpy implementation they replace: 50 rows in
    batches of 16 (a last batch of 2), 4 epochs, the same shuffles."""
    params, X, y = _data(task, n=50, K=3, T=4)
    new, loss = cnn.train_local(params, X, y, task, epochs=4, batch_size=16, lr=1e-2, seed=5)
    ref, ref_loss = cnn.train_local_reference(params, X, y, task, epochs=4, batch_size=16, lr=1e-2, seed=5)
    assert loss == pytest.approx(ref_loss, rel=1e-10)
    for k in params:
        assert not np.allclose(ref[k], params[k]), k              # training moved every array
        assert np.allclose(new[k], ref[k], rtol=1e-10, atol=1e-13), k
        assert new[k].dtype == np.float64 and new[k].shape == params[k].shape


def test_fast_training_is_deterministic_and_thread_independent():
    """The same seed gives the same bits, alone or with other trainings running in
    threads beside it; another seed gives another result."""
    from concurrent.futures import ThreadPoolExecutor
    params, X, y = _data("binary", n=200, K=4, T=10)

    def fit(seed):
        return cnn.train_local(params, X, y, "binary", epochs=5, batch_size=32, seed=seed)

    alone = fit(1)
    with ThreadPoolExecutor(4) as pool:
        side_by_side = list(pool.map(fit, [1, 2, 1, 2]))
    for got in (side_by_side[0], side_by_side[2]):
        assert got[1] == alone[1]
        assert all(np.array_equal(got[0][k], alone[0][k]) for k in params)
    assert not np.array_equal(side_by_side[1][0]["W"], alone[0]["W"])


def test_epochs_per_kernel_call_do_not_change_the_result(monkeypatch):
    """Row orders generated a few epochs at a time (here 1 and 2 per call, the last call
    shorter) give the same bits as all epochs in one call."""
    params, X, y = _data("regression", n=50, K=2, T=3)
    whole = cnn.train_local(params, X, y, "regression", epochs=5, batch_size=16, seed=2)
    for entries in (50, 100):
        monkeypatch.setattr(cnn, "ORDER_ENTRIES", entries)
        parts = cnn.train_local(params, X, y, "regression", epochs=5, batch_size=16, seed=2)
        assert parts[1] == whole[1] and all(np.array_equal(parts[0][k], whole[0][k]) for k in params)
