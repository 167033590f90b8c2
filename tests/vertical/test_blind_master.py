"""The blind master of the encrypted vertical modes (``label_privacy =
"paillier"``, forest and boosting): what the parties tell each other about
rows travels sealed end to end (:mod:`fedforest.vertical.paillier.sealed`),
so the master relays every message but reads no partition, no per-bin count
and no leaf set.

* A curious master: the three attacks of ``experiments/bench_leakage.py``
  (declined-leaf union, ID2Graph-style co-occurrence clustering, per-row bin
  reconstruction), run on the master's plaintext transcript, get no more
  labels than the majority class and no cell; no message it receives or
  sends holds a partition, a count or a split in the clear.
* The same attacks on what a passive party reads (it opens the label
  holder's decision and the other winners' bits: it still sees every
  partition) find the labels: the attacks have teeth.
* A hostile master that alters, replays or moves a sealed payload stops the
  job with an error naming the payload's field.
"""
import os
import sys

import numpy as np
import pytest

from fedforest.errors import RemoteError
from fedforest.jobs import run_job
from fedforest.transport import base

from _util import ROOT, make_table, party_frames

sys.path.insert(0, os.path.join(ROOT, "experiments"))
import bench_leakage as BL  # noqa: E402

KEY = dict(key_length=512, insecure_key=True)
LABEL_RANK = 2
GROUPS = [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
N_ROWS = 240
# what a partition, a histogram or a split looks like in the clear
PLAIN_KEYS = {"bits", "cnt", "wcnt", "hist", "holder_bits", "n_bins", "skip", "leaves", "split_feature",
              "split_bin", "set_of_leaf", "stored_leaves"}


def _table(seed=3):
    X, y = make_table("classification", 2, seed, N_ROWS, 9, 0.05)
    return party_frames(X, y, GROUPS, label_party=LABEL_RANK - 1), y.astype(str)


JOBS = {
    "forest": dict(mode="vertical", n_estimators=3),
    "boosting": dict(mode="vertical_boost", n_estimators=6, max_depth=4),
    # a validation share: the label holder needs every round's leaves (the parties' leaf sets)
    "boosting, early stopping": dict(mode="vertical_boost", n_estimators=6, max_depth=4, early_stopping_rounds=2,
                                     validation_fraction=0.25),
}
RANDOM_STATE = 1


def _train(tmp_path, job, **extra):
    frames, y = _table()
    options = dict(task="classification", label_column="y", label_privacy="paillier", random_state=RANDOM_STATE,
                   model_dir=str(tmp_path / "m"), n_jobs=1, **KEY)
    options.update(JOBS[job], **extra)
    with BL.Recorder() as rec:
        run_job("train", frames, **options)
    return rec, y


@pytest.fixture(scope="module", params=sorted(JOBS))
def recorded(request, tmp_path_factory):
    """A recorded job and the labels of the rows its trees grow on (a
    boosting job's training rows where it holds a validation share)."""
    job = request.param
    rec, y = _train(tmp_path_factory.mktemp("job"), job)
    train = None
    if "validation_fraction" in JOBS[job]:
        from fedforest.vertical.boost.params import BoostParams
        from fedforest.vertical.boost.boosting import holdout
        extra = {k: JOBS[job][k] for k in ("early_stopping_rounds", "validation_fraction")}
        train = holdout(y.shape[0], BoostParams(**extra), RANDOM_STATE)[0]
        y = y[train]
    rec.train = train
    return job, rec, y


def _attacks(rec, y, rank, max_depth):
    n_bins = {r - 1: nb for r, (_, nb) in rec.bins.items()}
    views = BL.build_view(rec.events, rank, LABEL_RANK, n_bins, getattr(rec, "train", None))
    labels = max(BL.declined_leaf_union(views, y, max_depth)[0], BL.cooccurrence_clustering(views, y))
    cells = BL.reconstruct_bins(views, rec.bins, LABEL_RANK, rank, y.shape[0])
    return views, labels, sum(c["recovered"] for c in cells.values())


def _majority(y):
    return float(np.mean(y == BL._class_order(y)[0]))


def _depth(job):
    return JOBS[job].get("max_depth")


def test_a_curious_master_reads_no_row(recorded):
    job, rec, y = recorded
    views, labels, cells = _attacks(rec, y, 0, _depth(job))
    assert len(views) >= 3                                  # it parsed every tree's draws
    assert sum(tv.n_read for tv in views) == 0              # and no split's rows
    assert labels <= _majority(y) + 0.01, (labels, _majority(y))
    assert cells == 0


def _keys(obj, path=""):
    """(path, name) of every entry of a message: the name without the prefix
    of a batch key (``<tree>.<key>``) or of a reply's part (``leaf.<key>``)."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield f"{path}.{k}", k.rsplit(".", 1)[-1] if isinstance(k, str) else k
            yield from _keys(v, f"{path}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _keys(v, f"{path}[{i}]")


def test_the_master_holds_no_partition_count_or_split_in_the_clear(recorded):
    job, rec, y = recorded
    seen = [(rcv, snd, path) for _, rcv, snd, msg in BL.plaintext(rec.events, 0)
            for path, name in _keys(msg) if name in PLAIN_KEYS]
    assert seen == []
    # the master does relay sealed payloads: the parties' sums, decisions and bits
    fields = {e[3] for e in rec.events if e[0] == "open"}
    assert {"sums", "decision"} <= fields, fields


def test_the_attacks_find_the_labels_where_the_partitions_are_read(recorded):
    """A passive party opens the label holder's decision and the other
    winners' bits: it rebuilds every partition, and the attacks read the
    labels from the trees' shapes; the label holder, which opens the
    passive parties' row counts, solves cells of their columns."""
    job, rec, y = recorded
    passive = 1 if LABEL_RANK != 1 else 3
    views, labels, cells = _attacks(rec, y, passive, _depth(job))
    assert sum(tv.n_read for tv in views) > 0
    assert labels >= _majority(y) + 0.15, (labels, _majority(y))
    _, _, holder_cells = _attacks(rec, y, LABEL_RANK, _depth(job))
    assert holder_cells > 0


# ---------------------------------------------------------------------------
# A hostile master: relayed sealed payloads altered, replayed, moved
# ---------------------------------------------------------------------------
def _hostile(monkeypatch, change):
    """Rank 0 passes every message it sends through ``change(msg, dest)``
    (None: unchanged) before sealing it; returns the count of changes."""
    orig_send = base.Comm.send
    done = {"n": 0}

    def send(self, dest, msg):
        if self.rank == 0 and isinstance(msg, dict):
            got = change(dict(msg), dest)
            if got is not None:
                done["n"] += 1
                msg = got
        return orig_send(self, dest, msg)

    monkeypatch.setattr(base.Comm, "send", send)
    return done


def _refused(tmp_path, job, field, **extra):
    with pytest.raises(RemoteError) as err:
        _train(tmp_path, job, **extra)
    if field is not None:
        assert field in err.value.remote_message, err.value.remote_message
    return err.value


def test_a_forged_bits_payload_in_an_apply_stops_the_job(tmp_path, monkeypatch):
    pick = BL.pick_apply_bits(LABEL_RANK - 1)

    def change(msg, dest):
        got = pick(msg, dest)
        if got is None or done["n"]:
            return None
        prefix, start, length = got
        return dict(msg, **{prefix + "sealed": BL._flip(msg[prefix + "sealed"], start + length // 2)})
    done = _hostile(monkeypatch, change)
    _refused(tmp_path, "forest", "'bits'")
    assert done["n"] == 1


def test_a_sums_payload_of_an_earlier_level_is_refused(tmp_path, monkeypatch):
    """The master keeps the sealed sums of a tree's first decide and passes
    them again in the next one."""
    first = {}

    def change(msg, dest):
        if msg.get("op") != "grow" or done["n"]:
            return None
        for t, sub in BL.sub_messages(msg):
            if sub.get("op") != "decide" or not sub.get("sealed_len", np.empty(0)).size:
                continue
            key = (dest, t)
            if key not in first:
                first[key] = {k: sub[k] for k in ("sealed", "sealed_from", "sealed_len")}
            elif np.array_equal(first[key]["sealed_from"], sub["sealed_from"]):
                return dict(msg, **{f"{t}.{k}": v for k, v in first[key].items()})
        return None
    done = _hostile(monkeypatch, change)
    _refused(tmp_path, "forest", "'sums'", max_depth=4, feature_sampling="tree", max_features=None)
    assert done["n"] == 1


def test_swapped_sources_of_sealed_payloads_are_refused(tmp_path, monkeypatch):
    """Two parties' payloads relayed under each other's names (their
    'sealed_from' entries swapped) open under neither."""
    def change(msg, dest):
        if done["n"]:
            return None
        for t, sub in BL.sub_messages(msg):
            src = sub.get("sealed_from")
            if isinstance(src, np.ndarray) and src.size >= 2 and src[0] != src[1]:
                return dict(msg, **{f"{t}.sealed_from": src[[1, 0] + list(range(2, src.size))]})
        return None
    done = _hostile(monkeypatch, change)
    err = _refused(tmp_path, "forest", None)
    assert any(f in err.remote_message for f in ("'sums'", "'decision'", "'bits'")), err.remote_message
    assert done["n"] == 1


def test_forged_leaf_sets_in_boosting_stop_the_job(tmp_path, monkeypatch):
    """With a validation share the label holder needs every round's leaves:
    the parties' leaf sets reach it sealed, and a master that alters one stops
    the job."""
    def change(msg, dest):
        got = None if done["n"] else BL.pick_gradients_leaf_sets(msg, dest)
        if got is None:
            return None
        prefix, start, length = got
        return dict(msg, **{prefix + "sealed": BL._flip(msg[prefix + "sealed"], start + length // 2)})
    done = _hostile(monkeypatch, change)
    _refused(tmp_path, "boosting", "'leaf_sets'", early_stopping_rounds=2, validation_fraction=0.25)
    assert done["n"] == 1
