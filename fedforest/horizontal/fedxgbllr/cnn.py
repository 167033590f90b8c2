"""The one-layer 1D CNN of FedXGBllr, in numpy with hand-written gradients.

Input: the outputs of all K·T trees of the aggregated ensemble for a row,
client ensembles side by side (client 1's T trees, then client 2's, ...).
Layers: Conv1d(1 -> C channels, kernel = stride = T) -> ReLU -> flatten
(channel-major, as PyTorch flattens (N, C, K)) -> Linear(C·K -> out).
A channel's kernel ``W[c]`` holds one learning rate per tree position; the
head's weights ``V[:, c·K + k]`` weigh client k's ensemble under channel c.

Losses (mean over the batch): binary cross-entropy on one logit, softmax
cross-entropy on ``out`` logits, or squared error for regression.

The functions here are the numpy reference (checked against finite
differences in the tests); training runs the same computation in compiled
code (:mod:`.kernels`, checked against this reference), with over ten times
less CPU per epoch.
"""
import numpy as np

from . import kernels

BINARY, MULTICLASS, REGRESSION = "binary", "multiclass", "regression"


def init_params(n_trees, n_clients, n_out, channels=64, seed=0):
    """Kaiming (He) normal weights for the ReLU network, zero biases."""
    rng = np.random.default_rng(seed)
    return {"W": rng.normal(0.0, np.sqrt(2.0 / n_trees), (channels, n_trees)),
            "b": np.zeros(channels),
            "V": rng.normal(0.0, np.sqrt(2.0 / (channels * n_clients)), (n_out, channels * n_clients)),
            "c": np.zeros(n_out)}


def _blocks(X, params):
    T = params["W"].shape[1]
    if X.shape[1] % T:
        raise ValueError(f"{X.shape[1]} tree outputs are not a whole number of {T}-tree ensembles")
    return X.reshape(X.shape[0], X.shape[1] // T, T)


def forward(params, X):
    """Logits / predictions (N, out) and the cache for :func:`backward`."""
    Xb = _blocks(X, params)                                       # (N, K, T)
    N, K, T = Xb.shape
    Z = (Xb.reshape(N * K, T) @ params["W"].T).reshape(N, K, -1).transpose(0, 2, 1)   # (N, C, K)
    Z = Z + params["b"][None, :, None]
    A = np.maximum(Z, 0.0)                                        # (N, C, K)
    F = A.reshape(A.shape[0], -1)                                 # channel-major flatten
    out = F @ params["V"].T + params["c"]
    return out, (Xb, Z, F)


def loss_and_grad(params, X, y, task):
    """Mean loss over the rows and the gradients of every parameter."""
    out, (Xb, Z, F) = forward(params, X)
    n = X.shape[0]
    if task == BINARY:
        z = out[:, 0]
        loss = np.mean(np.logaddexp(0.0, z) - y * z)
        d_out = ((1.0 / (1.0 + np.exp(-z))) - y)[:, None] / n
    elif task == MULTICLASS:
        shifted = out - out.max(axis=1, keepdims=True)
        logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        idx = np.asarray(y, dtype=np.int64)
        loss = -np.mean(logp[np.arange(n), idx])
        d_out = np.exp(logp)
        d_out[np.arange(n), idx] -= 1.0
        d_out /= n
    else:
        r = out[:, 0] - y
        loss = np.mean(r * r)
        d_out = (2.0 * r / n)[:, None]
    grads = {"V": d_out.T @ F, "c": d_out.sum(axis=0)}
    dZ = (d_out @ params["V"]).reshape(Z.shape) * (Z > 0)
    C, T = params["W"].shape
    grads["W"] = dZ.transpose(1, 0, 2).reshape(C, -1) @ Xb.reshape(-1, T)
    grads["b"] = dZ.sum(axis=(0, 2))
    return float(loss), grads


def predict(params, X, task):
    """Class probabilities (classification) or values (regression)."""
    out, _ = forward(params, X)
    if task == BINARY:
        p = 1.0 / (1.0 + np.exp(-out[:, 0]))
        return np.column_stack((1.0 - p, p))
    if task == MULTICLASS:
        e = np.exp(out - out.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    return out[:, 0]


class Adam:
    """Adam (Kingma & Ba) over a dict of arrays."""

    def __init__(self, params, lr=1e-3, betas=(0.5, 0.999), eps=1e-8):
        self.lr, self.b1, self.b2, self.eps = lr, betas[0], betas[1], eps
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}
        self.t = 0

    def step(self, params, grads):
        self.t += 1
        for k in params:
            self.m[k] = self.b1 * self.m[k] + (1 - self.b1) * grads[k]
            self.v[k] = self.b2 * self.v[k] + (1 - self.b2) * grads[k] ** 2
            m_hat = self.m[k] / (1 - self.b1 ** self.t)
            v_hat = self.v[k] / (1 - self.b2 ** self.t)
            params[k] = params[k] - self.lr * m_hat / (np.sqrt(v_hat) + self.eps)


def _start(params, n, batch_size, seed):
    """Copies of the parameters, the shuffling generator, and the batch size (at most the rows)."""
    params = {k: v.copy() for k, v in params.items()}
    return params, np.random.default_rng(seed), max(1, min(int(batch_size), n))


ORDER_ENTRIES = 1 << 20     # row indices generated ahead of a kernel call (8 MiB)


def train_local(params, X, y, task, epochs=100, batch_size=64, lr=1e-3, seed=0):
    """One client's update: ``epochs`` passes of shuffled mini-batches with a
    fresh Adam (betas 0.5, 0.999).  Returns new parameters and the last epoch's mean loss.

    The epochs run in compiled code (:func:`.kernels.train_epochs`, many per
    call, the GIL released); the shuffles are the reference's (:func:`train_local_reference`,
    the same computation in numpy), which it equals up to the order of the sums."""
    n = X.shape[0]
    params, rng, batch_size = _start(params, n, batch_size, seed)
    task_code = {BINARY: kernels.BINARY, MULTICLASS: kernels.MULTICLASS, REGRESSION: kernels.REGRESSION}[task]
    X = np.ascontiguousarray(X, dtype=np.float64)
    _blocks(X, params)                                  # K whole ensembles of T trees, or ValueError
    y = np.ascontiguousarray(y, dtype=np.float64)
    W, b, V, c = (np.ascontiguousarray(params[k], dtype=np.float64) for k in ("W", "b", "V", "c"))
    C, T = W.shape
    O, CK = V.shape
    K = CK // C
    opt = Adam({"W": W, "b": b, "V": V, "c": c}, lr=lr)
    m, v = opt.m, opt.v
    rows = batch_size * K                               # conv rows of a batch
    Xr, Z, dZ = np.empty((rows, T)), np.empty((rows, C)), np.empty((rows, C))
    out, d_out = np.empty((batch_size, O)), np.empty((batch_size, O))
    Vt, gVt = np.empty((O, K, C)), np.empty((O, K, C))
    gW, gb, gV, gc = np.empty_like(W), np.empty_like(b), np.empty_like(V), np.empty_like(c)
    per_epoch = -(-n // batch_size)
    chunk = max(1, ORDER_ENTRIES // n)                  # epochs per kernel call: their row orders at once
    last = 0.0
    for e0 in range(0, epochs, chunk):
        orders = np.stack([rng.permutation(n) for _ in range(e0, min(epochs, e0 + chunk))])
        last = kernels.train_epochs(X, y, orders, task_code, batch_size, W, b, V, c,
                                    m["W"], v["W"], m["b"], v["b"], m["V"], v["V"], m["c"], v["c"],
                                    e0 * per_epoch, opt.lr, opt.b1, opt.b2, opt.eps, Xr, Z, dZ, out, d_out, Vt,
                                    gW, gb, gV, gVt, gc)
    return {"W": W, "b": b, "V": V, "c": c}, float(last)


def train_local_reference(params, X, y, task, epochs=100, batch_size=64, lr=1e-3, seed=0):
    """:func:`train_local` in numpy, batch by batch (the reference of the compiled kernels)."""
    n = X.shape[0]
    params, rng, batch_size = _start(params, n, batch_size, seed)
    opt = Adam(params, lr=lr)
    last = 0.0
    for _ in range(epochs):
        order = rng.permutation(n)
        total = 0.0
        for s in range(0, n, batch_size):
            idx = order[s:s + batch_size]
            loss, grads = loss_and_grad(params, X[idx], y[idx], task)
            opt.step(params, grads)
            total += loss * idx.size
        last = total / n
    return params, last
