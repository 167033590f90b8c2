"""Encrypted labels (label_privacy = "paillier"): same trees as the plain mode,
what crosses the transport, and clear errors for altered or foreign ciphertexts."""
import os

import numpy as np
import pandas as pd
import pytest
from _util import assert_same_trees, complete_trees, party_frames, random_groups
from sklearn.datasets import make_classification, make_regression

from fedforest.vertical.forest import roles as vertical_roles
from fedforest.crypto import paillier as P
from fedforest.errors import InputError, RemoteError
from fedforest.jobs import run_vertical
from fedforest.tree.params import ForestParams, validate
from fedforest.transport import base
from fedforest.vertical import encrypted_labels as E
from fedforest.tree.growth import ForestTrees, SplitSettings
from fedforest.vertical.party_splitter import LocalParties, PartySplitter
from fedforest.vertical.tree_grower import TreeGrower
from fedforest.vertical.paillier.sealed import local_sealers
from fedforest.vertical.forest.held_labels import HeldLabels
from fedforest.vertical.paillier.holder import KeyHolder
from fedforest.vertical.paillier.relay import LabelHolderChooses, RowCount
from fedforest.tree.labels import PlainLabels

KEY = 512  # insecure, for speed; one test below uses 2048 bits


def _data(task, n, n_features, seed, n_classes=2, nan=0.05):
    rng = np.random.default_rng(seed)
    if task == "classification":
        X, y = make_classification(n, n_features, n_informative=4, n_classes=n_classes,
                                   random_state=seed)
    else:
        X, y = make_regression(n, n_features, n_informative=4, noise=5.0, random_state=seed)
    X[rng.random(X.shape) < nan] = np.nan
    return X, y


def _grow_both(task, X, y, groups, label_party, seed, n_trees=3, key=None, **params):
    """Trees of the plain grower and of the encrypted growth (the master's relay
    grower, the label holder deciding) on the same data."""
    is_clf = task == "classification"
    params = validate(ForestParams(n_estimators=n_trees, random_state=seed, **params), task)
    n = X.shape[0]
    n_classes = int(y.max()) + 1 if is_clf else 1
    settings = SplitSettings(params, n, is_clf, n_classes, X.shape[1])
    n_total = n
    if is_clf:
        codes = y.astype(np.int64)
        spec_args = {}
        scored = codes
    else:
        codes, step, bias = E.regression_grid(y, n_total)
        spec_args = {"step": step, "bias": bias}
        scored = codes * step
    labels = PlainLabels(scored, is_clf, n_classes)
    plain_parties = [PartySplitter(X[:, g], settings, labels) for g in groups]
    plain = TreeGrower(LocalParties(plain_parties), labels, params, settings, [len(g) for g in groups],
                       y_codes=labels.y if is_clf else None, classes=np.arange(n_classes))
    pub, priv = key or P.generate_keypair(KEY, insecure=True)
    spec = E.EncryptionSpec(is_clf, n_classes, n_total, pub.key_length, **spec_args)
    enc = pub.encrypt_many(spec.row_plaintexts(codes))
    counts = [len(g) for g in groups]
    sealers = local_sealers(len(groups))
    parties, bins = [], []
    for p, g in enumerate(groups):
        if p == label_party:
            parties.append(PartySplitter(X[:, g], settings, HeldLabels(labels, codes, spec),
                                         KeyHolder(ForestTrees(settings), spec, priv, p, counts, sealers[p])))
            bins.append(None)
        else:
            parties.append(PartySplitter(X[:, g], settings, E.EncryptedLabels(enc, pub),
                                         E.CipherSums(spec, pub, sealers[p], label_party)))
            bins.append((parties[-1].n_bins, parties[-1].skip))
    none = [np.empty(0, dtype=np.int64)]
    parties[label_party].channel.set_bins({"n_bins": np.concatenate(none + [b[0] for b in bins if b is not None]),
                                   "skip": np.concatenate(none + [b[1] for b in bins if b is not None])})
    he = TreeGrower(LocalParties(parties), RowCount(n), params, settings, counts,
                    channel=LabelHolderChooses(label_party, spec, pub))
    seeds = np.random.SeedSequence(seed).spawn(n_trees)
    a = [plain.grow(s) for s in seeds]
    b = [he.grow(s) for s in seeds]
    return a, b, plain_parties, parties, parties[label_party]


def _assert_equal_growth(a, b, plain_parties, parties):
    """The master's structure, the label holder's statistics and leaf values and
    every party's own splits are the plain mode's."""
    holder = next(p for p in parties if isinstance(p.channel, KeyHolder))
    assert len(a) == len(b) == len(holder.trees)
    for t, (x, z, h) in enumerate(zip(a, b, holder.trees)):
        for k in ("children_left", "children_right", "owner", "n_node_samples"):
            assert np.array_equal(x[k], z[k]), f"tree {t}: master {k} differs"
        assert not {"value", "impurity", "weighted_n_node_samples"} & set(z)   # none of them on the master
        for k in ("value", "impurity", "weighted_n_node_samples"):
            assert np.array_equal(x[k], h[k]), f"tree {t}: label holder's {k} differs"
    for p, (u, v) in enumerate(zip(plain_parties, parties)):
        for t, (x, z) in enumerate(zip(u.trees, v.trees)):
            for k in ("children_left", "children_right", "feature", "threshold", "missing_left"):
                assert np.array_equal(x[k], z[k], equal_nan=True), f"party {p} tree {t}: {k} differs"


@pytest.mark.parametrize("task,n_classes", [("classification", 2), ("classification", 4),
                                             ("regression", 1)])
@pytest.mark.parametrize("case", range(3))
def test_same_trees_as_plain(task, n_classes, case):
    rng = np.random.default_rng(100 + case)
    X, y = _data(task, 260, 7, seed=case, n_classes=n_classes)
    n_parties = 1 + case  # 1..3 parties
    groups = random_groups(7, n_parties, rng) if n_parties > 1 else [list(range(7))]
    label_party = int(rng.integers(n_parties))
    if case == 2:  # a label holder without feature columns
        groups.insert(label_party, [])
    a, b, pp, hp, he = _grow_both(task, X, y, groups, label_party, seed=case, max_depth=6,
                                  feature_sampling=("node", "tree", "node")[case],
                                  min_samples_leaf=1 + case)
    _assert_equal_growth(a, b, pp, hp)
    assert sum(t["children_left"].size for t in a) > 3 * 9  # real trees, not stumps
    assert (he.channel.decrypted > 0) == (n_parties > 1)


def test_label_holder_subtracts_its_own_histograms_and_the_trees_still_match(monkeypatch):
    """The label holder searches its own columns in plaintext, with the plain
    mode's histogram subtraction (every node keeping its histograms here)."""
    from fedforest.tree import growth
    from fedforest.vertical import party_splitter
    monkeypatch.setattr(growth, "HIST_CACHE_BYTES_PER_ROW", 10 ** 9)
    derived = []
    orig = party_splitter.PartySplitter._subtraction

    def counting(self, nodes, starts, ends):
        out = orig(self, nodes, starts, ends)
        if isinstance(self.channel, KeyHolder):
            derived.append(int((out[2] >= 0).sum()))
        return out

    monkeypatch.setattr(party_splitter.PartySplitter, "_subtraction", counting)
    X, y = _data("classification", 400, 6, seed=6)
    a, b, pp, hp, _ = _grow_both("classification", X, y, [[0, 1, 2], [3, 4, 5]], 0, seed=3,
                                 n_trees=2, feature_sampling="tree", max_features=None, max_depth=5)
    _assert_equal_growth(a, b, pp, hp)
    assert sum(derived) > 5


def test_histogram_subtraction_used_and_exact():
    """With per-tree features every child shares its parent's features, so the
    larger child's histograms are derived; the trees still match."""
    X, y = _data("classification", 400, 6, seed=5)
    calls = []
    orig = E.CipherSums.sums

    def counting(self, sp, pair_node, pair_feat):
        calls.append(pair_node.size)
        return orig(self, sp, pair_node, pair_feat)

    E.CipherSums.sums = counting
    try:
        a, b, pp, hp, _ = _grow_both("classification", X, y, [[0, 1, 2], [3, 4, 5]], 0, seed=1,
                                     n_trees=1, feature_sampling="tree", max_features=None,
                                     max_depth=5)
    finally:
        E.CipherSums.sums = orig
    _assert_equal_growth(a, b, pp, hp)
    internal = int((a[0]["children_left"] >= 0).sum())
    # without subtraction every searched node needs all 3 features of party 2
    searched = sum(calls)
    assert searched < 3 * (2 * internal + 1)


def test_regression_rounding_is_tiny_and_identity_on_grid():
    y = np.random.default_rng(0).normal(50, 20, size=5000)
    r = E.rounded_targets(y, 5000)
    assert np.max(np.abs(r - y)) <= np.max(np.abs(y)) * 2.0 ** -18
    on_grid = np.round(y * 8) / 8  # multiples of 1/8 are on the grid already
    assert np.array_equal(E.rounded_targets(on_grid, 5000), on_grid)
    q, step, bias = E.regression_grid(y, 5000)
    assert 5000 * int(np.abs(q).max()) ** 2 < 2 ** 53 and np.abs(q).max() <= bias


def _frames(task="classification", n=240, seed=3, n_classes=2):
    X, y = _data(task, n, 6, seed=seed, n_classes=n_classes)
    return party_frames(X, y, [[0, 1], [2, 3], [4, 5]], label_party=1), X, y


OPTS = dict(label_column="y", key_length=KEY, insecure_key=True, n_estimators=2, random_state=4,
            max_depth=4)


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_protocol_same_model_as_plain(tmp_path, task):
    """Through the transport: the encrypted run's saved trees equal the plain run's
    (regression targets on the fixed-point grid, as :func:`rounded_targets` gives)."""
    frames, X, y = _frames(task)
    if task == "regression":
        frames[1]["y"] = E.rounded_targets(y, len(y))
    models = {}
    for mode in ("plain", "paillier"):
        d = str(tmp_path / mode)
        s = run_vertical("train", frames, task=task, model_dir=d, label_privacy=mode, **OPTS)
        models[mode] = complete_trees(d, 3, [0, 2, 4, 6])
        if mode == "paillier":
            assert s["key_length"] == KEY and s["paillier_key_holder"] == "label_holder"
    assert_same_trees(models["paillier"], models["plain"])
    written = {}
    for mode in ("plain", "paillier"):
        out = str(tmp_path / f"pred-{mode}.csv")
        run_vertical("predict", [f.drop(columns="y", errors="ignore") for f in frames],
                     model_dir=str(tmp_path / mode), output=out, result_party=2)
        written[mode] = pd.read_csv(out)
    assert written["paillier"].equals(written["plain"])
    # the leaf values are the label holder's: another result party is refused before any work
    with pytest.raises(InputError, match="result_party = 2"):
        run_vertical("predict", [f.drop(columns="y", errors="ignore") for f in frames],
                     model_dir=str(tmp_path / "paillier"), output=str(tmp_path / "x.csv"), result_party=1)
    # node-by-node prediction would route every row through the master: refused before any work
    with pytest.raises(InputError, match="predict_method.*'oneshot'"):
        run_vertical("predict", [f.drop(columns="y", errors="ignore") for f in frames], predict_method="classical",
                     model_dir=str(tmp_path / "paillier"), output=str(tmp_path / "x.csv"), result_party=2)
    assert not os.path.exists(tmp_path / "x.csv")


def test_trees_of_a_batch_on_threads_same_model_as_plain(tmp_path, monkeypatch):
    """A forest's batch of trees is summed and decided tree by tree on the
    parties' threads (each tree's arithmetic on one thread): the same trees
    as the plain mode."""
    import threading
    from fedforest.tree import threads as numba_threads
    frames, X, y = _frames()
    seen = set()
    orig = E.CipherSums._sums

    def sums(self, sp, pair_node, pair_feat):
        seen.add(threading.current_thread().name)
        return orig(self, sp, pair_node, pair_feat)

    monkeypatch.setattr(E.CipherSums, "_sums", sums)
    opts = dict(OPTS, n_estimators=8, n_jobs=2)
    for mode in ("plain", "paillier"):
        run_vertical("train", frames, task="classification", model_dir=str(tmp_path / mode), label_privacy=mode,
                     **opts)
    assert_same_trees(complete_trees(str(tmp_path / "paillier"), 3, list(range(8))),
                      complete_trees(str(tmp_path / "plain"), 3, list(range(8))))
    if numba_threads.threads() >= 2 and numba_threads.concurrent_launches_ok():
        assert any(name.startswith("ThreadPoolExecutor") for name in seen), seen


@pytest.mark.parametrize("mode", ["vertical", "vertical_boost"])
def test_the_master_cannot_keep_a_full_model_of_an_encrypted_job(tmp_path, mode):
    """The master relays the splits sealed: master_full_model is refused before any work."""
    frames, X, y = _frames()
    opts = dict(OPTS, max_depth=3) if mode == "vertical" else dict(label_column="y", key_length=KEY,
                                                                   insecure_key=True, n_estimators=2)
    with pytest.raises(InputError, match="master_full_model"):
        run_vertical("train", frames, mode=mode, task="classification", model_dir=str(tmp_path / "m"),
                     label_privacy="paillier", master_full_model=True, **opts)
    assert not os.path.exists(tmp_path / "m")


def test_2048_bit_key_same_trees():
    X, y = _data("classification", 120, 6, seed=8, n_classes=3)
    key = P.generate_keypair(2048)
    a, b, pp, hp, he = _grow_both("classification", X, y, [[0, 1, 2], [3, 4, 5]], 1, seed=2, n_trees=1,
                                  key=key, max_depth=3)
    _assert_equal_growth(a, b, pp, hp)
    assert he.channel.spec.key_length == 2048


# ---------------------------------------------------------------------------
# Privacy audit
# ---------------------------------------------------------------------------
def _record_sends(monkeypatch):
    log = []
    orig = base.Comm.send

    def send(self, dest, msg):
        log.append((self.rank, dest, msg))
        return orig(self, dest, msg)

    monkeypatch.setattr(base.Comm, "send", send)
    return log


def _arrays(obj):
    """Every numpy array or scalar inside a message."""
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _arrays(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _arrays(v)
    elif isinstance(obj, np.ndarray):
        yield obj
    elif isinstance(obj, (int, float, np.number)) and not isinstance(obj, bool):
        yield np.asarray(obj)


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_privacy_audit(tmp_path, monkeypatch, task):
    frames, X, y = _frames(task, n_classes=3 if task == "classification" else 2)
    label_rank = 2
    codes = np.unique(y, return_inverse=True)[1] if task == "classification" else None
    log = _record_sends(monkeypatch)
    run_vertical("train", frames, task=task, model_dir=str(tmp_path / "m"), label_privacy="paillier",
                 **OPTS)
    assert log
    label_vectors = [np.asarray(y, dtype=np.float64)]
    if codes is not None:
        label_vectors.append(codes.astype(np.float64))
    else:
        label_vectors.append(E.rounded_targets(y, len(y)))
    class_counts = np.bincount(codes) if codes is not None else None
    features = {r: X[:, cols] for r, cols in ((1, [0, 1]), (2, [2, 3]), (3, [4, 5]))}
    for src, dest, msg in log:
        for a in _arrays(msg):
            if a.dtype.kind in "iuf" and a.size >= len(y) // 2 and a.dtype != np.uint8:
                flat = a.astype(np.float64).ravel()
                for vec in label_vectors:
                    # no plaintext label vector (nor a long stretch of it) travels anywhere
                    assert not np.array_equal(flat[:len(vec)], vec), (src, dest, list(msg))
            if src == label_rank and a.dtype.kind in "iu" and class_counts is not None:
                assert not np.array_equal(a.ravel(), class_counts), (src, dest, list(msg))
            if dest == 0 and a.dtype.kind == "f":
                # the master never receives a raw feature value of any party
                for r, Xr in features.items():
                    vals = Xr[~np.isnan(Xr)]
                    assert not np.isin(a[np.isfinite(a)], vals).any(), (src, r, list(msg))
        if src == label_rank:
            # after label encryption the label holder sends the master ciphertexts, its decisions'
            # splits, winners and left-row counts and sealed payloads, nothing else
            allowed = {"spec", "seconds", "blocks", "public_key", "split", "winner", "n_left",
                       "n_rows", "n_features", "has_label", "n_trees",
                       "public", "sealed", "digests", "n_spaced_ids", "tree_bytes_sent", "model_dir", "fingerprint",
                       "tree_batch", "batch_memory_mb",
                       # the privacy audit's two aggregate fractions, at the end (docs/protocol.md)
                       "privacy_audit"}
            allowed |= {k for k in msg if k.startswith("sealed")}
            allowed |= {"len." + k for k in allowed}   # per-tree entry counts of a batch reply
            assert set(msg) <= allowed, set(msg) - allowed
            assert "stats" not in msg and "gain" not in msg
        if dest not in (0, label_rank) and src == 0 and "labels" in msg:
            assert msg["labels"].dtype == np.uint8 and msg["labels"].shape == (len(y), 2 * KEY // 8)
    # parties without labels receive no label statistic in plaintext: only ciphertext blocks
    for src, dest, msg in log:
        if dest in (1, 3):
            assert not {"y", "stats", "hist"} & set(msg)
    # the master receives no row's bit, bin count, bootstrap weight, sum or split choice in the clear:
    # what the parties tell each other reaches it sealed
    for src, dest, msg in log:
        if dest == 0:
            plain = {k.split(".", 1)[-1] for k in msg}
            assert not {"bits", "cnt", "wcnt", "hist", "n_bins", "skip", "feature", "bin", "split_feature",
                        "split_bin", "split_missing_left", "holder_bits"} & plain, (src, sorted(plain))


# ---------------------------------------------------------------------------
# Altered ciphertexts, foreign keys, overflow, settings
# ---------------------------------------------------------------------------
def test_tampered_histogram_ciphertext(tmp_path, monkeypatch):
    frames, _, _ = _frames()
    orig = E.CipherSums.sums
    state = {"n": 0}

    def tamper(self, sp, pair_node, pair_feat):
        reply = orig(self, sp, pair_node, pair_feat)
        state["n"] += 1
        if state["n"] == 2 and reply["hist"].size:
            reply["hist"] = reply["hist"].copy()
            reply["hist"][0, -1] ^= 0x01
        return reply

    monkeypatch.setattr(E.CipherSums, "sums", tamper)
    with pytest.raises(RemoteError, match="altered or made under another key") as err:
        run_vertical("train", frames, task="classification", model_dir=str(tmp_path / "m"),
                     label_privacy="paillier", **OPTS)
    assert err.value.rank == 2 and err.value.exc_type == "ProtocolIntegrityError"   # the key holder saw it


def _sent_widths(spec, n_bins, pair_feat, reply):
    """The widths of the sums a party's reply carries, in order (its layout, as the label holder rebuilds it)."""
    seg, layout, _ = E.hist_layout(pair_feat, n_bins, reply["cnt"].astype(np.int64))
    wcnt = reply["wcnt"].astype(np.int64)
    weights = np.concatenate([E.bin_counts(wcnt[seg[i]:seg[i + 1]], int(n_bins[f]))[layout[i][1]]
                              for i, f in enumerate(pair_feat.tolist())])
    return spec.sum_widths(weights.tolist()), weights


@pytest.mark.parametrize("slot", [0, 1])
def test_sums_moved_beyond_what_rows_can_sum_are_caught(tmp_path, monkeypatch, slot):
    """A party moves one slot of one sum just beyond what rows can sum (here
    with the label holder's key, to place it exactly): the sum's weight
    travels in plaintext (no slot holds it), the target slots are checked
    against the bounds of sums of that weight (``[0, 2 B w]`` for the
    highest, ``[0, B**2 w]`` for the lowest), and the job stops."""
    frames, X, y = _frames("regression")
    keys = []
    make = P.generate_keypair

    def generate(*args, **kwargs):
        keys.append(make(*args, **kwargs))
        return keys[-1]

    monkeypatch.setattr(P, "generate_keypair", generate)
    orig = E.CipherSums.sums
    state = {"n": 0}

    def tamper(self, sp, pair_node, pair_feat):
        reply = orig(self, sp, pair_node, pair_feat)
        state["n"] += 1
        if state["n"] == 1 and reply["hist"].size:
            spec, w = self.spec, self.spec.width
            widths, weights = _sent_widths(spec, sp.n_bins, pair_feat, reply)
            last = spec.sum_runs(widths)[1] - 1        # the first ciphertext's last sum lies lowest
            cts = self.key.deserialize(reply["hist"])
            m = int(keys[0][1].decrypt(cts[0]))
            top, low = (m >> w) & ((1 << (widths[last] - w)) - 1), m & ((1 << w) - 1)
            wt = int(weights[last])
            delta = (2 * spec.bias * wt + 1 - top) << w if slot == 0 else spec.bias ** 2 * wt + 1 - low
            cts[0] = cts[0] * self.key.encrypt(delta) % self.key.nsq
            reply["hist"] = self.key.serialize(cts)
        return reply

    monkeypatch.setattr(E.CipherSums, "sums", tamper)
    with pytest.raises(RemoteError, match="do not match its row counts") as err:
        run_vertical("train", frames, task="regression", model_dir=str(tmp_path / "m"),
                     label_privacy="paillier", **OPTS)
    assert err.value.rank == 2 and err.value.exc_type == "ProtocolIntegrityError"


def test_a_foreign_key_relayed_to_a_party_is_caught(tmp_path, monkeypatch):
    """A hostile master relays its own public key (and a matching fingerprint)
    to a party without labels: the party's sums are not sums under the label
    holder's key, and the label holder stops the job before any tree is stored."""
    from fedforest.transport import base
    frames, _, _ = _frames()
    foreign, _ = P.generate_keypair(KEY, insecure=True)
    orig = base.Comm.send

    def send(self, dest, msg):
        if self.rank == 0 and dest == 1 and msg.get("op") == "setup":
            msg = dict(msg, public_key=foreign.to_bytes(), fingerprint=foreign.fingerprint)
        return orig(self, dest, msg)

    monkeypatch.setattr(base.Comm, "send", send)
    with pytest.raises(RemoteError, match="altered or made under another key|not a valid"):
        run_vertical("train", frames, task="classification", model_dir=str(tmp_path / "m"),
                     label_privacy="paillier", **OPTS)
    assert not any((tmp_path / "m").rglob("tree-*.npz"))


def test_slot_overflow_refused_before_work(tmp_path):
    frames, _, _ = _frames()
    with pytest.raises(RemoteError, match="overflow 4-bit slots: too many rows"):
        run_vertical("train", frames, task="classification", model_dir=str(tmp_path / "m"),
                     label_privacy="paillier", slot_bits=4, **OPTS)
    assert not os.path.exists(tmp_path / "m")


def test_decrypted_overflow_detected():
    key, priv = P.generate_keypair(KEY, insecure=True)
    spec = E.EncryptionSpec(True, 2, 100, KEY)
    values = np.array([[3, 4], [5, 6]])
    cts = [key.encrypt(v) for v in spec.pack_values(values)]
    assert np.array_equal(spec.unpack_values([priv.decrypt(c) for c in cts], 2), values)
    big = key.encrypt(1 << (spec.width * 2 * 2 + 3))
    with pytest.raises(InputError, match="overflows its slots"):
        spec.unpack_values([priv.decrypt(big)], 2)


@pytest.mark.parametrize("kind", ["two classes", "four classes", "one class", "regression", "gradients"])
def test_sums_travel_in_the_bits_their_weight_needs(kind):
    """Row ciphertexts summed per bin and packed as a party packs them come
    back, at the label holder, as the bins' full statistics: the first one
    from the bin's weight, every sum in as many bits as its weight needs
    (one bit for a bin of one row of a two-class forest); a plaintext with a
    bit above its sums is refused."""
    from fedforest.vertical.boost.encrypted_gradients import GradientSpec
    from fedforest.vertical.paillier.holder import half_decrypter
    key, priv = P.generate_keypair(KEY, insecure=True)
    rng = np.random.default_rng(5)
    n = 200
    if kind == "gradients":
        spec = GradientSpec(n, KEY)
        q_g, q_h = rng.integers(-spec.bias, spec.bias + 1, n), rng.integers(0, spec.bias + 1, n)
        plain = spec.row_plaintexts(q_g, q_h)
        stats = np.stack([np.ones(n, np.int64), q_g + spec.bias, q_h], axis=1)
    elif kind == "regression":
        codes, step, bias = E.regression_grid(rng.normal(size=n) * 50, n)
        spec = E.EncryptionSpec(False, 1, n, KEY, step=step, bias=bias)
        plain = spec.row_plaintexts(codes)
        stats = np.stack([np.ones(n, np.int64), codes + bias, codes * codes], axis=1)
    else:
        k = {"two classes": 2, "four classes": 4, "one class": 1}[kind]
        spec = E.EncryptionSpec(True, k, n, KEY)
        codes = rng.integers(0, k, n)
        plain = spec.row_plaintexts(codes)
        stats = np.eye(k, dtype=np.int64)[codes]
    cts = [key.encrypt(int(m)) for m in plain]
    # bins of 1 to 12 rows, one row in the first
    sizes = np.concatenate(([1], rng.integers(1, 13, 20)))
    bounds = np.concatenate(([0], np.cumsum(sizes)))
    sums = [P.group_products(cts, list(range(a, b)), [0, b - a], key.nsq)[0] for a, b in zip(bounds[:-1], bounds[1:])]
    want = np.array([stats[a:b].sum(axis=0) for a, b in zip(bounds[:-1], bounds[1:])])
    widths = spec.sum_widths(sizes.tolist())
    if kind == "two classes":
        assert widths == [int(w).bit_length() for w in sizes] and widths[0] == 1
    runs = spec.sum_runs(widths)
    # the highest bits of every plaintext stay free (a lone sum wider than the rest travels alone)
    assert all(sum(widths[a:b]) <= KEY - 1 - E.SPARE_BITS or b == a + 1 for a, b in zip(runs[:-1], runs[1:]))
    packed = E.pack_sums(key, sums, widths, runs, workers=2)
    half, limit = half_decrypter(priv)
    opened = [half(c) if sum(widths[a:b]) <= limit else priv.decrypt(c)
              for c, a, b in zip(packed, runs[:-1], runs[1:])]
    assert [int(m) for m in opened] == [int(priv.decrypt(c)) for c in packed]
    got = spec.full_sums(spec.split_sums(opened, widths, runs), sizes)
    assert np.array_equal(got, want) and spec.in_bounds(got)
    plain_packed, w2, r2 = spec.sum_plaintexts(want)
    assert w2 == widths and r2 == runs and [int(m) for m in plain_packed] == [int(m) for m in opened]
    with pytest.raises(InputError, match="overflows its slots"):
        spec.split_sums([opened[0] | (1 << sum(widths[runs[0]:runs[1]]))] + opened[1:], widths, runs)


@pytest.mark.parametrize("opts,match", [
    ({"key_length": 1024}, "2048 or 3072"),
    ({"key_length": 1004, "insecure_key": True}, "multiple of 8"),
    ({"split_method": "exact"}, "needs split_method = 'hist'"),
    ({"class_weight": "balanced"}, "not available with label_privacy = 'paillier'"),
    ({"label_privacy": "Paillier"}, "must be one of 'plain', 'paillier'"),
    ({"encrypt_workers": 0}, "encrypt_workers"),
])
def test_bad_settings_refused_before_work(tmp_path, opts, match):
    frames, _, _ = _frames()
    options = dict(OPTS, label_privacy="paillier", key_length=2048, insecure_key=False)
    options.update(opts)
    with pytest.raises(InputError, match=match):
        run_vertical("train", frames, task="classification", model_dir=str(tmp_path / "m"), **options)
    assert not os.path.exists(tmp_path / "m")


def test_party_requiring_encryption_refuses_plain_master(tmp_path, monkeypatch):
    frames, _, _ = _frames()
    orig = vertical_roles.client_train

    def strict(comm, cfg):
        if comm.rank == 2:
            cfg.label_privacy = "paillier"
        return orig(comm, cfg)

    monkeypatch.setattr(vertical_roles, "client_train", strict)
    with pytest.raises(RemoteError, match="party 2 requires 'paillier'"):
        run_vertical("train", frames, task="classification", model_dir=str(tmp_path / "m"),
                     label_privacy="plain", **OPTS)


def test_parallel_label_encryption_decrypts_right():
    key, priv = P.generate_keypair(KEY, insecure=True)
    values = list(range(40))
    cts = E.encrypt_rows(key, values, workers=2)
    assert [int(priv.decrypt(c)) for c in cts] == values
    assert len(set(int(c) for c in cts)) == len(values)
