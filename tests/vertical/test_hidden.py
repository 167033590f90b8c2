"""The hidden instance space (``instance_space = H.HIDDEN``, encrypted
boosting): the parties without the labels never learn which rows share a
node (fedforest.vertical.paillier.hidden).

* The trees are the shared instance space's, node for node, and so are the
  predictions (2 and 3 parties; binary, multiclass, regression).
* A curious passive party, played on everything it receives, opens and
  holds: no partition, no node and no leaf reaches it, and the attacks of
  ``experiments/bench_leakage.py`` (declined-leaf union, co-occurrence
  clustering) on the row groups its own winning thresholds form get no more
  labels than guessing the majority class.  The same test on the shared
  instance space finds the labels (the test has teeth).
* Settings that cannot run hidden are refused before any work.
"""
import glob
import os
import sys

import numpy as np
import pandas as pd
import pytest

from fedforest.errors import InputError, RemoteError
from fedforest.jobs import run_job
from fedforest.vertical.paillier import hidden as H

from _util import ROOT, make_table, party_frames

sys.path.insert(0, os.path.join(ROOT, "experiments"))
import bench_leakage as BL  # noqa: E402

KEY = dict(key_length=512, insecure_key=True)


def _frames(task, n_classes, groups, label_party, n=160, seed=5):
    X, y = make_table(task, n_classes, seed, n, sum(len(g) for g in groups), 0.05)
    return party_frames(X, y, groups, label_party=label_party), y


def _job(tmp_path, frames, task, space, label_rank=1, **extra):
    model = str(tmp_path / f"m-{space}")
    opts = dict(mode="vertical_boost", task=task, label_column="y", label_privacy="paillier", random_state=3,
                model_dir=model, n_jobs=1, n_estimators=3, max_depth=3, max_bins=16, instance_space=space, **KEY)
    opts.update(extra)
    summary = run_job("train", frames, **opts)
    out = str(tmp_path / f"pred-{space}.csv")
    test = [f.iloc[:40].drop(columns=["y"], errors="ignore") for f in frames]
    run_job("predict", test, mode="vertical_boost", model_dir=model, output=out, result_party=label_rank)
    return model, summary, pd.read_csv(out)


def _trees(model, rank):
    return [dict(np.load(p)) for p in sorted(glob.glob(os.path.join(model, f"party-{rank}", "trees", "*.npz")))]


CASES = {
    "binary, 2 parties": ("classification", 2, [[0, 1, 2, 3], [4, 5, 6, 7]], 0),
    "multiclass, 3 parties": ("classification", 3, [[0, 1, 2], [3, 4, 5], [6, 7]], 1),
    "regression, 3 parties": ("regression", 0, [[0, 1, 2], [3, 4, 5], [6, 7]], 2),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hidden_grows_the_shared_trees_and_predictions(tmp_path, case):
    task, n_classes, groups, lp = CASES[case]
    frames, _ = _frames(task, n_classes, groups, lp)
    shared, _, pred_s = _job(tmp_path, frames, task, H.SHARED, lp + 1)
    hidden, summary, pred_h = _job(tmp_path, frames, task, H.HIDDEN, lp + 1)
    assert summary["instance_space"] == H.HIDDEN
    a, b = _trees(shared, lp + 1), _trees(hidden, lp + 1)
    assert len(a) == len(b) >= 3
    for x, y in zip(a, b):
        for k in ("children_left", "children_right", "owner", "split_feature", "split_bin", "feature"):
            assert np.array_equal(x[k], y[k]), k
        np.testing.assert_array_equal(x["value"], y["value"])
    # the passive parties' splits are there, by threshold only
    owners = np.concatenate([t["owner"][t["children_left"] >= 0] for t in b])
    assert (owners != lp).any()
    for rank in range(1, len(groups) + 1):
        if rank == lp + 1:
            continue
        for t in _trees(hidden, rank):
            assert t["children_left"].shape == (1,)          # no node of the label holder's trees
            assert t["hidden_feature"].size == t["hidden_threshold"].size
    pd.testing.assert_frame_equal(pred_s, pred_h)


def test_a_damaged_threshold_file_is_refused_before_prediction(tmp_path):
    frames, _ = _frames("classification", 2, [[0, 1, 2, 3], [4, 5, 6, 7]], 0)
    model, _, _ = _job(tmp_path, frames, "classification", H.HIDDEN)
    path = sorted(glob.glob(os.path.join(model, "party-2", "trees", "*.npz")))[0]
    tree = dict(np.load(path))
    tree["hidden_feature"] = tree["hidden_feature"] + 10
    np.savez(path, **tree)
    with pytest.raises(RemoteError) as err:
        run_job("predict", [f.drop(columns=["y"], errors="ignore") for f in frames], mode="vertical_boost",
                model_dir=model, output=str(tmp_path / "p.csv"), result_party=1)
    assert err.value.rank == 2 and "'hidden_feature' holds values outside the columns" in err.value.remote_message


# ---------------------------------------------------------------------------
# A curious passive party
# ---------------------------------------------------------------------------
N_ROWS = 240
GROUPS = [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
LABEL_RANK = 2
# what a partition, a node or a leaf looks like, in a message or an opened payload
NODE_KEYS = {"split", "split_nodes", "nodes", "winner", "winners", "bits", "cand", "level_nodes", "leaves",
             "n_left", "child_fmask"}


def _recorded(tmp_path, space):
    X, y = make_table("classification", 2, 3, N_ROWS, 9, 0.05)
    frames = party_frames(X, y, GROUPS, label_party=LABEL_RANK - 1)
    opts = dict(mode="vertical_boost", task="classification", label_column="y", label_privacy="paillier",
                random_state=1, model_dir=str(tmp_path / space), n_jobs=1, n_estimators=6, max_depth=4,
                instance_space=space, **KEY)
    with BL.Recorder() as rec:
        run_job("train", frames, **opts)
    return rec, y.astype(str), str(tmp_path / space)


@pytest.fixture(scope="module", params=[H.SHARED, H.HIDDEN])
def passive_view(request, tmp_path_factory):
    rec, y, model = _recorded(tmp_path_factory.mktemp("rec"), request.param)
    return request.param, rec, y, model


def _majority(y):
    return float(np.mean(y == BL._class_order(y)[0]))


def _named_keys(obj):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield k.rsplit(".", 1)[-1] if isinstance(k, str) else k
            yield from _named_keys(v)


def test_a_curious_passive_party_learns_no_node(passive_view):
    space, rec, y, model = passive_view
    passive = 1
    received = [msg for _, rcv, _, msg in BL.plaintext(rec.events, passive) if rcv == passive]
    opened = [e for e in rec.events if e[0] == "open" and e[1] == passive]
    names = {k for m in received for k in _named_keys(m)} | {k for e in opened for k in _named_keys(e[-1])}
    leaked = names & NODE_KEYS
    if space == H.SHARED:
        assert leaked, names          # the shared space shows it every partition
    else:
        assert not leaked, leaked
        assert {e[3] for e in opened} <= {"slots", "decision"}


def test_the_attacks_find_no_label_in_the_hidden_space(passive_view):
    """Declined-leaf union and co-occurrence clustering on the row sets the
    passive party rebuilds from everything it receives and opens: in the
    shared space every partition (the labels come out), in the hidden space
    none (guessing the majority class)."""
    space, rec, y, model = passive_view
    passive = 1
    n_bins = {r - 1: nb for r, (_, nb) in rec.bins.items()}
    majority = _majority(y)
    views = BL.build_view(rec.events, passive, LABEL_RANK, n_bins)
    got = max(BL.declined_leaf_union(views, y, 4)[0], BL.cooccurrence_clustering(views, y))
    if space == H.SHARED:
        assert sum(tv.n_read for tv in views) > 0
        assert got >= majority + 0.15, (got, majority)
    else:
        assert sum(getattr(tv, "n_read", 0) for tv in views) == 0
        assert got <= majority + 0.02, (got, majority)


# ---------------------------------------------------------------------------
# Refusals before any work
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("extra, name", [
    (dict(label_privacy="plain"), "instance_space"),
    (dict(subsample=0.5), "instance_space"),
    (dict(early_stopping_rounds=2), "instance_space"),
    (dict(label_holder_first_trees=1), "label_holder_first_trees"),
])
def test_what_cannot_run_hidden_is_refused(tmp_path, extra, name):
    frames, _ = _frames("classification", 2, [[0, 1, 2, 3], [4, 5, 6, 7]], 0)
    with pytest.raises(InputError) as err:
        _job(tmp_path, frames, "classification", H.HIDDEN, **extra)
    assert name in str(err.value)


FOREST_CASES = {
    "binary, 2 parties": ("classification", 2, [[0, 1, 2, 3], [4, 5, 6, 7]], 0, {}),
    "multiclass, 3 parties, no bootstrap": ("classification", 3, [[0, 1, 2], [3, 4, 5], [6, 7]], 1,
                                            {"bootstrap": False}),
    "regression, 3 parties": ("regression", 0, [[0, 1, 2], [3, 4, 5], [6, 7]], 2, {"max_features": None}),
}


@pytest.mark.parametrize("case", sorted(FOREST_CASES))
def test_the_forest_grows_the_shared_trees_in_the_hidden_space(tmp_path, case):
    task, n_classes, groups, lp, extra = FOREST_CASES[case]
    frames, _ = _frames(task, n_classes, groups, lp)
    out = {}
    for space in (H.SHARED, H.HIDDEN):
        model = str(tmp_path / space)
        run_job("train", frames, mode="vertical", task=task, label_column="y", label_privacy="paillier",
                instance_space=space, model_dir=model, n_estimators=3, max_depth=4, max_bins=16, random_state=2,
                n_jobs=1, **KEY, **extra)
        pred = str(tmp_path / f"{space}.csv")
        run_job("predict", [f.iloc[:50] for f in frames], mode="vertical", model_dir=model, output=pred,
                result_party=lp + 1)
        out[space] = (_trees(model, lp + 1), pd.read_csv(pred))
    for x, y in zip(out[H.SHARED][0], out[H.HIDDEN][0]):
        for k in ("children_left", "owner", "split_feature", "split_bin", "n_node_samples"):
            assert np.array_equal(x[k], y[k]), k
        np.testing.assert_array_equal(x["value"], y["value"])
    assert any((t["owner"][t["children_left"] >= 0] != lp).any() for t in out[H.HIDDEN][0])
    pd.testing.assert_frame_equal(out[H.SHARED][1], out[H.HIDDEN][1])


def test_a_hostile_master_cannot_switch_a_party_to_another_space(tmp_path, monkeypatch):
    """The instance space is each party's own setting too: a setup message
    that names another one is refused by the party."""
    from fedforest.transport import base
    orig = base.Comm.send

    def send(self, dest, msg):
        if self.rank == 0 and isinstance(msg, dict) and msg.get("op") == "setup":
            msg = dict(msg, instance_space=H.SHARED)
        return orig(self, dest, msg)
    monkeypatch.setattr(base.Comm, "send", send)
    frames, _ = _frames("classification", 2, [[0, 1, 2, 3], [4, 5, 6, 7]], 0)
    with pytest.raises(RemoteError) as err:
        _job(tmp_path, frames, "classification", H.HIDDEN)
    assert "instance_space" in err.value.remote_message


# ---------------------------------------------------------------------------
# The slot layout, against a reference in plain Python
# ---------------------------------------------------------------------------
class _Spec:
    def __init__(self, key_length, width, n_stats, bounds=None):
        self.key_length, self.width, self.n_stats = key_length, width, n_stats
        bounds = (2 ** width - 1,) * n_stats if bounds is None else bounds
        self.stat_bounds = lambda: bounds


def _reference_plaintexts(slots, vals):
    """What the parties' sums decrypt to: per (feature, bin) group every node's
    value in its slot, several groups per plaintext where one holds every node."""
    spec = slots.spec
    n_groups, n_cand, ns = vals.shape

    def value(v):
        out = 0
        for x, w in zip(v, slots.widths):
            out = (out << w) | int(x)
        return out
    n_ct = slots.n_ct(n_cand)
    out = []
    if n_ct > 1:
        for g in range(n_groups):
            for c in range(n_ct):
                out.append(sum(value(vals[g, k]) << ((k - c * slots.per) * slots.value_bits)
                               for k in range(c * slots.per, min(n_cand, (c + 1) * slots.per))))
        return out
    k, width = slots.groups(n_cand), n_cand * slots.value_bits
    groups = [sum(value(vals[g, j]) << (j * slots.value_bits) for j in range(n_cand)) for g in range(n_groups)]
    for i in range(0, n_groups, k):
        acc = 0
        for x in groups[i:i + k]:
            acc = (acc << width) + x
        out.append(acc)
    return out


@pytest.mark.parametrize("key_length, width, n_stats, bounds", [
    (512, 20, 3, None), (2048, 54, 3, None), (1024, 9, 2, None), (2048, 54, 3, (4000, 2 ** 53, 2 ** 52))])
def test_node_slots_unpack_equals_a_python_reference(key_length, width, n_stats, bounds):
    rng = np.random.default_rng(key_length + width)
    slots = H.NodeSlots(_Spec(key_length, width, n_stats, bounds))
    for n_cand in (1, 2, slots.per, slots.per + 1, 3 * slots.per - 1):
        vals = np.stack([rng.integers(0, 1 << min(w, 40), size=(7, n_cand)) for w in slots.widths], axis=2)
        plains = _reference_plaintexts(slots, vals)
        assert len(plains) == slots.n_sums(7, n_cand)
        np.testing.assert_array_equal(slots.unpack(plains, 7, n_cand), vals)
        plains[-1] += 1 << (key_length - 2)        # a bit above every sum: an overflow, or forged
        with pytest.raises(H.ProtocolIntegrityError):
            slots.unpack(plains, 7, n_cand)


def test_row_plaintexts_put_each_row_in_its_node_slot():
    slots = H.NodeSlots(_Spec(512, 10, 2))          # 25 values of 20 bits per plaintext
    values = [3, 5, 7, 9]
    pos = np.array([0, 26, -1, 24])
    got = slots.row_plaintexts(values, pos, 27)       # 2 plaintexts per row
    assert got == [3, 0, 0, 5 << 20, 0, 0, 9 << (24 * 20), 0]
