"""Numba kernels of FedXGBllr's CNN: one epoch of mini-batch Adam in compiled code.

They compute what :func:`.cnn.loss_and_grad` and :class:`.cnn.Adam` compute
(the numpy reference, which the tests compare them with), batch by batch, up
to the order of the floating-point sums.  Float64 throughout, no allocation
per batch (the caller passes the work buffers), the row order of every epoch
given by the caller (the reference's ``rng.permutation``), one thread per call
with the GIL released: the clients of a job in one process train side by side,
and the result does not depend on how many threads there are.

Layout: ``X`` (rows, K·T) holds the tree outputs, client ensembles side by
side; batch row ``i`` and client block ``k`` make the conv row ``j = i·K + k``
(``Xr[j]``: the T outputs of client k's trees on that row).  ``Z[j, c]`` is
channel ``c``'s pre-activation there; ``V[o, c·K + k]`` weighs it in the head
(channel-major, as :func:`.cnn.forward` flattens).

The two products of a batch, the convolution ``Z = Xr Wᵀ`` (:func:`gemm_nt`)
and the kernel's gradient ``gW = dZᵀ Xr`` (:func:`gemm_tn`), take several rows
of each operand per pass so that every load serves several multiply-adds;
they are nearly all of the work.  The ReLU's zeros make no difference to the sums.
"""
import math

from numba import njit

BINARY, MULTICLASS, REGRESSION = 0, 1, 2
# reassociation (vectorised dot products) and fused multiply-adds only: nothing assumed about NaN,
# infinities or signed zeros
FAST = {"reassoc", "contract"}


@njit(cache=True, nogil=True, fastmath=FAST)
def gemm_nt(A, B, out):
    """``out[i, j] = sum_t A[i, t] * B[j, t]`` for C-contiguous ``A`` (M, L), ``B`` (N, L)."""
    M, L = A.shape
    N = B.shape[0]
    i = 0
    while i + 4 <= M:
        a0, a1, a2, a3 = A[i], A[i + 1], A[i + 2], A[i + 3]
        j = 0
        while j + 2 <= N:
            u, v = B[j], B[j + 1]
            s0 = s1 = s2 = s3 = r0 = r1 = r2 = r3 = 0.0
            for t in range(L):
                s0 += a0[t] * u[t]
                s1 += a1[t] * u[t]
                s2 += a2[t] * u[t]
                s3 += a3[t] * u[t]
                r0 += a0[t] * v[t]
                r1 += a1[t] * v[t]
                r2 += a2[t] * v[t]
                r3 += a3[t] * v[t]
            out[i, j], out[i + 1, j], out[i + 2, j], out[i + 3, j] = s0, s1, s2, s3
            out[i, j + 1], out[i + 1, j + 1], out[i + 2, j + 1], out[i + 3, j + 1] = r0, r1, r2, r3
            j += 2
        if j < N:
            u = B[j]
            s0 = s1 = s2 = s3 = 0.0
            for t in range(L):
                s0 += a0[t] * u[t]
                s1 += a1[t] * u[t]
                s2 += a2[t] * u[t]
                s3 += a3[t] * u[t]
            out[i, j], out[i + 1, j], out[i + 2, j], out[i + 3, j] = s0, s1, s2, s3
        i += 4
    for ii in range(i, M):
        a = A[ii]
        for j in range(N):
            u = B[j]
            s = 0.0
            for t in range(L):
                s += a[t] * u[t]
            out[ii, j] = s


@njit(cache=True, nogil=True, fastmath=FAST)
def gemm_tn(A, B, out):
    """``out[p, t] = sum_m A[m, p] * B[m, t]`` for C-contiguous ``A`` (M, P), ``B`` (M, L):
    eight rows of both at a time, added to each row of ``out`` in one pass."""
    M, P = A.shape
    L = B.shape[1]
    out[:] = 0.0
    m = 0
    while m + 8 <= M:
        b0, b1, b2, b3, b4, b5, b6, b7 = B[m], B[m + 1], B[m + 2], B[m + 3], B[m + 4], B[m + 5], B[m + 6], B[m + 7]
        for p in range(P):
            d0, d1, d2, d3 = A[m, p], A[m + 1, p], A[m + 2, p], A[m + 3, p]
            d4, d5, d6, d7 = A[m + 4, p], A[m + 5, p], A[m + 6, p], A[m + 7, p]
            o = out[p]
            for t in range(L):
                o[t] += (((d0 * b0[t] + d1 * b1[t]) + (d2 * b2[t] + d3 * b3[t]))
                         + ((d4 * b4[t] + d5 * b5[t]) + (d6 * b6[t] + d7 * b7[t])))
        m += 8
    for mm in range(m, M):
        b0 = B[mm]
        for p in range(P):
            d0 = A[mm, p]
            o = out[p]
            for t in range(L):
                o[t] += d0 * b0[t]


@njit(cache=True, nogil=True)
def head_by_client(V, K, Vt):
    """``Vt[o, k, c] = V[o, c·K + k]``: the head's weights of client block k, contiguous over channels."""
    O, CK = V.shape
    C = CK // K
    for o in range(O):
        for ch in range(C):
            for k in range(K):
                Vt[o, k, ch] = V[o, ch * K + k]


@njit(cache=True, nogil=True, fastmath=FAST)
def forward_batch(X, rows, K, W, b, Vt, c, Xr, Z, out):
    """The batch ``X[rows]``: its conv rows ``Xr[:nb·K]``, pre-activations ``Z[:nb·K]``
    and outputs ``out[:nb]`` (``nb = rows.size``; ``Vt`` from :func:`head_by_client`)."""
    C, T = W.shape
    O = Vt.shape[0]
    nb = rows.size
    nj = nb * K
    for j in range(nj):
        src = X[rows[j // K]]
        off = (j % K) * T
        dst = Xr[j]
        for t in range(T):
            dst[t] = src[off + t]
    gemm_nt(Xr[:nj], W, Z[:nj])
    for j in range(nj):
        z = Z[j]
        for ch in range(C):
            z[ch] += b[ch]
    for i in range(nb):
        for o in range(O):
            s = 0.0
            for k in range(K):
                z = Z[i * K + k]
                v = Vt[o, k]
                for ch in range(C):
                    s += v[ch] * max(z[ch], 0.0)
            out[i, o] = s + c[o]


@njit(cache=True, nogil=True, error_model="numpy")
def loss_batch(out, y, rows, task, d_out):
    """Mean loss of the batch (labels ``y[rows]``) and its gradient ``d_out[:nb]``
    with respect to the outputs, as :func:`.cnn.loss_and_grad`."""
    nb = rows.size
    O = out.shape[1]
    total = 0.0
    if task == BINARY:
        for i in range(nb):
            z = out[i, 0]
            yi = y[rows[i]]
            total += (max(z, 0.0) + math.log1p(math.exp(-abs(z)))) - yi * z     # logaddexp(0, z) - y z
            d_out[i, 0] = ((1.0 / (1.0 + math.exp(-z))) - yi) / nb
    elif task == MULTICLASS:
        for i in range(nb):
            top = out[i, 0]
            for o in range(1, O):
                top = max(top, out[i, o])
            se = 0.0
            for o in range(O):
                se += math.exp(out[i, o] - top)
            lse = math.log(se)
            yi = int(y[rows[i]])
            total -= (out[i, yi] - top) - lse
            for o in range(O):
                d_out[i, o] = math.exp((out[i, o] - top) - lse)
            d_out[i, yi] -= 1.0
            for o in range(O):
                d_out[i, o] /= nb
    else:
        for i in range(nb):
            r = out[i, 0] - y[rows[i]]
            total += r * r
            d_out[i, 0] = 2.0 * r / nb
    return total / nb


@njit(cache=True, nogil=True, fastmath=FAST)
def backward_batch(nb, K, Vt, Xr, Z, d_out, dZ, gW, gb, gV, gVt, gc):
    """Gradients of the batch's mean loss (``d_out`` from :func:`loss_batch`); ``dZ``
    (batch rows · K, C) and ``gVt`` (``Vt``'s shape) are work buffers."""
    O, _, C = Vt.shape
    nj = nb * K
    gb[:] = 0.0
    gVt[:] = 0.0
    gc[:] = 0.0
    for i in range(nb):
        for o in range(O):
            gc[o] += d_out[i, o]
    for j in range(nj):
        i = j // K
        k = j % K
        z = Z[j]
        dz = dZ[j]
        dz[:] = 0.0
        for o in range(O):
            d = d_out[i, o]
            v = Vt[o, k]
            gv = gVt[o, k]
            for ch in range(C):
                dz[ch] += d * v[ch]
                gv[ch] += d * max(z[ch], 0.0)
        for ch in range(C):
            g = dz[ch] if z[ch] > 0.0 else 0.0     # the ReLU passes no gradient where it is off
            dz[ch] = g
            gb[ch] += g
    for o in range(O):
        for ch in range(C):
            for k in range(K):
                gV[o, ch * K + k] = gVt[o, k, ch]
    gemm_tn(dZ[:nj], Xr[:nj], gW)


@njit(cache=True, nogil=True, error_model="numpy")      # no division-by-zero check: vectorised
def adam_update(p, g, m, v, lr, b1, b2, eps, bc1, bc2):
    """One Adam step of ``p`` in place, as :meth:`.cnn.Adam.step` (bc1 = 1 - b1^t, bc2 = 1 - b2^t)."""
    pf, gf, mf, vf = p.reshape(-1), g.reshape(-1), m.reshape(-1), v.reshape(-1)
    for q in range(pf.size):
        mf[q] = b1 * mf[q] + (1 - b1) * gf[q]
        vf[q] = b2 * vf[q] + (1 - b2) * gf[q] ** 2
        pf[q] = pf[q] - lr * (mf[q] / bc1) / (math.sqrt(vf[q] / bc2) + eps)


@njit(cache=True, nogil=True)
def train_epoch(X, y, order, task, batch_size, W, b, V, c, mW, vW, mb, vb, mV, vV, mc, vc, step,
                lr, b1, b2, eps, Xr, Z, dZ, out, d_out, Vt, gW, gb, gV, gVt, gc):
    """One epoch: the rows in ``order``, ``batch_size`` at a time, one Adam step per batch
    (``step`` steps done before it).  The parameters and Adam's moments change in place;
    returns the epoch's mean loss (each batch's mean weighed by its rows).  Work
    buffers: ``Xr``, ``Z`` and ``dZ`` (batch_size·K, T or C), ``out`` and ``d_out``
    (batch_size, O), ``Vt`` and ``gVt`` (O, K, C), the gradients' shapes."""
    n = order.size
    K = V.shape[1] // W.shape[0]
    total = 0.0
    s = 0
    while s < n:
        rows = order[s:s + batch_size]
        nb = rows.size
        head_by_client(V, K, Vt)
        forward_batch(X, rows, K, W, b, Vt, c, Xr, Z, out)
        loss = loss_batch(out, y, rows, task, d_out)
        backward_batch(nb, K, Vt, Xr, Z, d_out, dZ, gW, gb, gV, gVt, gc)
        step += 1
        bc1 = 1 - b1 ** float(step)         # float powers, as Python's: the reference's bias corrections
        bc2 = 1 - b2 ** float(step)
        adam_update(W, gW, mW, vW, lr, b1, b2, eps, bc1, bc2)
        adam_update(b, gb, mb, vb, lr, b1, b2, eps, bc1, bc2)
        adam_update(V, gV, mV, vV, lr, b1, b2, eps, bc1, bc2)
        adam_update(c, gc, mc, vc, lr, b1, b2, eps, bc1, bc2)
        total += loss * nb
        s += nb
    return total / n


@njit(cache=True, nogil=True)
def train_epochs(X, y, orders, task, batch_size, W, b, V, c, mW, vW, mb, vb, mV, vV, mc, vc, step,
                 lr, b1, b2, eps, Xr, Z, dZ, out, d_out, Vt, gW, gb, gV, gVt, gc):
    """:func:`train_epoch` for each row of ``orders`` (one epoch's row order each), in
    one call (the GIL released throughout); returns the last epoch's mean loss."""
    per_epoch = (orders.shape[1] + batch_size - 1) // batch_size
    last = 0.0
    for e in range(orders.shape[0]):
        last = train_epoch(X, y, orders[e], task, batch_size, W, b, V, c, mW, vW, mb, vb, mV, vV, mc, vc,
                           step + e * per_epoch, lr, b1, b2, eps, Xr, Z, dZ, out, d_out, Vt, gW, gb, gV, gVt, gc)
    return last
