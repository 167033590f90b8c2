"""A hostile master: the master's role runs unchanged but one of its messages
is altered on the way out (it holds valid channel keys, so the party receives
the message as genuine).  The party checks every in-job message against what
it knows itself and stops the job with an error naming the field, before a
kernel sees a bad index and before it writes a file; honest runs are checked
by the lossless, batch, resume and encrypted tests."""
import os

import numpy as np
import pytest
from sklearn.datasets import make_classification

from fedforest.crypto import paillier as P
from fedforest.data import alignment
from fedforest.errors import RemoteError
from fedforest.jobs import run_job, run_vertical
from fedforest.transport import base
from fedforest.transport.base import ProtocolError
from fedforest.vertical import messages
from fedforest.tree.growth import SplitSettings
from fedforest.vertical.messages import pack_batch
from fedforest.vertical.party_splitter import PartySplitter
from fedforest.tree.labels import PlainLabels
from fedforest.tree.params import ForestParams, validate
from fedforest.vertical import model_files, protocol

from _util import party_frames

GROUPS = [[0, 1], [2, 3]]
OPTS = dict(task="classification", label_column="y", n_estimators=2, random_state=3, max_depth=3,
            n_jobs=1)
PAILLIER = dict(label_privacy="paillier", key_length=512, insecure_key=True)


def _frames(n=120, seed=0):
    X, y = make_classification(n, 4, n_informative=3, n_redundant=0, n_classes=3, random_state=seed)
    return party_frames(np.round(X, 2), y, GROUPS, label_party=1)   # party 2 holds the label


def hostile(monkeypatch, op, change, to=None, times=1):
    """Rank 0 passes its first ``times`` messages of ``op`` (to party ``to``, or
    any) through ``change(msg, dest) -> msg`` before sealing them."""
    orig_send, orig_bcast = base.Comm.send, base.Comm.bcast
    done = {"n": 0}

    def send(self, dest, msg):
        if self.rank == 0 and to in (None, dest) and done["n"] < times:
            if msg.get("op") == op:
                done["n"] += 1
                msg = change(dict(msg), dest)
            elif msg.get("op") == messages.FUSED and op in (messages.COMMIT, messages.GROW):
                # a batch's commit travels with the next batch's first grow message
                part = "commit" if op == messages.COMMIT else "grow"
                done["n"] += 1
                msg = dict(msg, **{part: change(dict(msg[part]), dest)})
        return orig_send(self, dest, msg)

    def bcast(self, msg):
        if self.rank == 0 and msg.get("op") == op:   # one send per party, so one can differ
            for c in self.clients:
                send(self, c, msg)
            return msg
        return orig_bcast(self, msg)

    monkeypatch.setattr(base.Comm, "send", send)
    monkeypatch.setattr(base.Comm, "bcast", bcast)
    return done


def _files(folder):
    return sorted(os.path.relpath(os.path.join(r, f), folder) for r, _, fs in os.walk(folder) for f in fs)


def refused(tmp_path, field, exc_type="ProtocolError", rank=None, command="train", frames=None,
            **options):
    """Run the job; it must stop with ``exc_type`` on a party naming ``field``,
    and nothing may be written outside the model folder."""
    before = _files(tmp_path)
    options = dict(OPTS, model_dir=str(tmp_path / "m"), **options)
    with pytest.raises(RemoteError) as err:
        run_job(command, frames or _frames(), **dict({"mode": "vertical"}, **options))
    if exc_type is not None:
        assert err.value.exc_type == exc_type, err.value
    assert field in err.value.remote_message, err.value.remote_message
    if rank is not None:
        assert err.value.rank == rank
    assert [f for f in _files(tmp_path) if not f.startswith("m" + os.sep)] == \
        [f for f in before if not f.startswith("m" + os.sep)]
    return err.value


def _tree_keys(msg, suffix):
    return [k for k in msg if isinstance(k, str) and k.endswith("." + suffix)]


# ---------------------------------------------------------------------------
# B1: settings and slot layout are the party's own
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("field,value", [
    ("reveal_splits", True),        # the party's configuration refused master_full_model
    ("hist_cache_rows", 0),         # every node would keep its histograms
    ("crit", 1),
    ("n_classes", 70_000),
    ("min_samples_leaf", 0),
    ("max_depth", 60),
    ("split_method", "exact"),
])
def test_settings_must_be_the_partys_own(tmp_path, monkeypatch, field, value):
    def change(msg, dest):
        msg["settings"] = dict(msg["settings"], **{field: value})
        return msg
    hostile(monkeypatch, protocol.SETUP, change)
    refused(tmp_path, repr(field))


def test_settings_with_an_extra_attribute_are_refused(tmp_path, monkeypatch):
    hostile(monkeypatch, protocol.SETUP, lambda m, d: dict(m, settings=dict(m["settings"], X=None)))
    refused(tmp_path, "'settings' has the fields")


def test_a_party_that_refused_the_full_model_never_reveals_its_splits(tmp_path, monkeypatch):
    sent = []
    orig = base.Comm.send

    def spy(self, dest, msg):
        if self.rank != 0:
            sent.append(msg)
        return orig(self, dest, msg)
    monkeypatch.setattr(base.Comm, "send", spy)
    hostile(monkeypatch, protocol.SETUP,
            lambda m, d: dict(m, settings=dict(m["settings"], reveal_splits=True)))
    refused(tmp_path, "'reveal_splits'")
    assert not any("threshold" in m for m in sent)


@pytest.mark.parametrize("field,value", [("per_ciphertext", 1), ("width", 300), ("key_length", 1024),
                                         ("n_classes", 4)])
def test_slot_layout_must_be_the_one_the_party_builds(tmp_path, monkeypatch, field, value):
    def change(msg, dest):
        msg["spec"] = dict(msg["spec"], **{field: value})
        return msg
    hostile(monkeypatch, protocol.SETUP, change, to=1)   # party 1 holds no label
    refused(tmp_path, repr(field), rank=1, **PAILLIER)


def test_label_holder_keeps_its_own_slot_layout(tmp_path, monkeypatch):
    hostile(monkeypatch, protocol.SETUP, lambda m, d: dict(m, spec=dict(m["spec"], width=9)), to=2)
    refused(tmp_path, "'width'", rank=2, **PAILLIER)


def test_slot_layout_from_a_message_is_rebuilt():
    from fedforest.vertical import encrypted_labels as E
    spec = E.EncryptionSpec(True, 3, 100, 512)
    assert E.EncryptionSpec.from_dict(spec.to_dict()).to_dict() == spec.to_dict()
    for change in ({"width": 10 ** 6}, {"per_ciphertext": 10 ** 6}, {"n_stats": 7}, {"step": "1"},
                   {"extra": 1}):
        with pytest.raises(ProtocolError, match="slot layout"):
            E.EncryptionSpec.from_dict(dict(spec.to_dict(), **change))


# ---------------------------------------------------------------------------
# B5: the label column is the party's own
# ---------------------------------------------------------------------------
def test_label_column_must_be_the_partys_own(tmp_path, monkeypatch):
    # a feature column as the "label": its holder would send it in the clear
    hostile(monkeypatch, protocol.LOAD, lambda m, d: dict(m, label_column="f0"), times=2)
    refused(tmp_path, "label_column", exc_type="InputError")


# ---------------------------------------------------------------------------
# A1: labels and classes
# ---------------------------------------------------------------------------
def _bad_y(kind):
    def change(msg, dest):
        y = msg["y"].copy()
        if kind == "too large":
            y[5] = msg["n_classes"]
        elif kind == "negative":
            y[5] = -1
        elif kind == "short":
            y = y[:-7]
        elif kind == "float":
            y = y.astype(np.float64)
        elif kind == "class missing":
            y[y == 1] = 0
        msg["y"] = y
        return msg
    return change


@pytest.mark.parametrize("kind", ["too large", "negative", "short", "float", "class missing"])
def test_class_codes_are_checked(tmp_path, monkeypatch, kind):
    hostile(monkeypatch, protocol.SETUP, _bad_y(kind), to=1)
    refused(tmp_path, "'y'", rank=1)


def test_label_holder_refuses_labels_that_are_not_its_own(tmp_path, monkeypatch):
    def change(msg, dest):
        y = msg["y"].copy()
        y[:10] = (y[:10] + 1) % 3
        return dict(msg, y=y)
    hostile(monkeypatch, protocol.SETUP, change, to=2)
    refused(tmp_path, "'y' differs from this party's own labels", rank=2)


@pytest.mark.parametrize("n_classes", [121, 2, 70_000, True, 3.0])
def test_number_of_classes_is_bounded(tmp_path, monkeypatch, n_classes):
    hostile(monkeypatch, protocol.SETUP, lambda m, d: dict(m, n_classes=n_classes))
    refused(tmp_path, "'n_classes'")


# ---------------------------------------------------------------------------
# A2: bootstrap counts
# ---------------------------------------------------------------------------
def _counts(kind):
    def change(msg, dest):
        for key in _tree_keys(msg, "counts"):
            c = msg[key]
            if kind == "long":
                c = np.concatenate((c, np.ones(5, dtype=c.dtype)))
            elif kind == "negative":
                c = c.astype(np.int32)
                c[3] = -1
            elif kind == "float":
                c = c.astype(np.float64)
            elif kind == "sum":
                c = c.copy()
                c[0] += 1
            elif kind == "2-D":
                c = c.reshape(-1, 1)
            msg[key] = c
        return msg
    return change


@pytest.mark.parametrize("kind", ["long", "negative", "float", "sum", "2-D"])
def test_bootstrap_counts_are_checked(tmp_path, monkeypatch, kind):
    hostile(monkeypatch, messages.GROW, _counts(kind), to=1)
    refused(tmp_path, "'counts'", rank=1)


def test_counts_of_a_run_without_bootstrap_are_all_one(tmp_path, monkeypatch):
    def change(msg, dest):
        for key in _tree_keys(msg, "counts"):
            c = msg[key].copy()
            c[:2], c[2:4] = 2, 0
            msg[key] = c
        return msg
    hostile(monkeypatch, messages.GROW, change, to=1)
    refused(tmp_path, "'counts'", rank=1, bootstrap=False)


# ---------------------------------------------------------------------------
# A3: the nodes and feature masks of a find
# ---------------------------------------------------------------------------
def _find(kind):
    def change(msg, dest):
        for key in _tree_keys(msg, "nodes"):
            t = key.split(".")[0]
            if msg.get(f"{t}.op") != "find":
                continue
            nodes, mask = msg[key], msg[f"{t}.fmask"]
            if kind == "not open":
                nodes = nodes + 40
            elif kind == "twice":
                nodes, mask = np.repeat(nodes, 2), np.repeat(mask, 2, axis=0)
            elif kind == "wide mask":
                mask = np.ones((mask.shape[0], mask.shape[1] + 3), dtype=np.uint8)
            elif kind == "short mask":
                mask = mask[:0]
            elif kind == "float mask":
                mask = mask.astype(np.float64)
            elif kind == "short stats":
                msg[f"{t}.stats"] = msg[f"{t}.stats"][:-1]
            elif kind == "nan stats":
                msg[f"{t}.stats"] = np.full_like(msg[f"{t}.stats"], np.nan)
            msg[key], msg[f"{t}.fmask"] = nodes, mask
        return msg
    return change


@pytest.mark.parametrize("kind,field", [("not open", "'nodes'"), ("twice", "'nodes'"),
                                        ("wide mask", "'fmask'"), ("short mask", "'fmask'"),
                                        ("float mask", "'fmask'"), ("short stats", "'stats'"),
                                        ("nan stats", "'stats'")])
def test_find_names_open_leaves_and_own_columns(tmp_path, monkeypatch, kind, field):
    hostile(monkeypatch, messages.GROW, _find(kind), to=1)
    refused(tmp_path, field, rank=1)


def test_find_at_a_later_level_names_only_the_new_leaves(tmp_path, monkeypatch):
    """The root, searched again after its split, is no open leaf any more."""
    def change(msg, dest):
        # a tree's later finds are its find messages without its opening draws
        for key in _tree_keys(msg, "op"):
            t = key.split(".")[0]
            if msg[key] == "find" and f"{t}.counts" not in msg:
                msg[f"{t}.nodes"] = np.zeros(1, dtype=np.int32)
                msg[f"{t}.fmask"] = np.ones((1, 2), dtype=np.uint8)
        return msg
    hostile(monkeypatch, messages.GROW, change, to=1, times=10)
    refused(tmp_path, "'nodes'", rank=1)


# ---------------------------------------------------------------------------
# A4: the key holder's split choice (encrypted labels)
# ---------------------------------------------------------------------------
def _flip(blob, at=None):
    blob = blob.copy()
    blob[blob.size // 2 if at is None else at] ^= 1
    return blob


@pytest.mark.parametrize("kind", ["flip", "drop", "other tree", "earlier level"])
def test_the_decision_reaches_a_party_sealed(tmp_path, monkeypatch, kind):
    """The label holder's decision (the feature, bin and side of each split a
    party won, its own bits) reaches the winner sealed: a master that alters
    it, drops it, or passes one of another tree or of an earlier level stops
    the job with an error naming the payload."""
    seen = {}

    def change(msg, dest):
        for key in _tree_keys(msg, "decision"):
            t = int(key.split(".")[0])
            blob = msg[key]
            if kind == "flip":
                msg[key] = _flip(blob)
            elif kind == "drop":
                del msg[key]
            elif kind == "other tree":
                if seen and t not in seen:
                    msg[key] = next(iter(seen.values()))
                seen.setdefault(t, blob)
            elif kind == "earlier level":
                if t in seen:
                    msg[key] = seen[t]
                seen.setdefault(t, blob)
        return msg
    hostile(monkeypatch, messages.GROW, change, to=1, times=200)
    refused(tmp_path, "'decision'", rank=1, exc_type=None, **dict(PAILLIER, max_depth=4))


@pytest.mark.parametrize("kind,field", [("not open", "'nodes'"), ("wide mask", "'fmask'"),
                                        ("short mask", "'fmask'")])
def test_paillier_find_names_open_leaves_and_own_features(tmp_path, monkeypatch, kind, field):
    """A party without the labels sums only its own columns at open leaves."""
    hostile(monkeypatch, messages.GROW, _find(kind), to=1)
    refused(tmp_path, field, rank=1, **PAILLIER)


def test_paillier_find_holds_no_statistics(tmp_path, monkeypatch):
    def change(msg, dest):
        for key in _tree_keys(msg, "fmask"):
            msg[key.replace("fmask", "stats")] = np.zeros((msg[key].shape[0], 3))
        return msg
    hostile(monkeypatch, messages.GROW, change, to=1)
    refused(tmp_path, "'stats'", rank=1, **PAILLIER)


def _ahead(kind):
    """Changes to a partition that lets the party apply its level itself."""
    def change(msg, dest):
        for key in _tree_keys(msg, "level_nodes"):
            t = key.split(".")[0]
            if kind == "drop own":
                msg[key] = np.setdiff1d(msg[key], msg[f"{t}.nodes"]).astype(np.int32)
            elif kind == "not open":
                msg[key] = msg[key] + 40
            elif kind == "forged decision":
                msg[f"{t}.decision"] = _flip(msg[f"{t}.decision"])
            elif kind == "wide mask":
                m = msg[f"{t}.child_fmask"]
                msg[f"{t}.child_fmask"] = np.ones((m.shape[0], m.shape[1] + 1), dtype=np.uint8)
            elif kind == "few masks":
                msg[f"{t}.child_fmask"] = msg[f"{t}.child_fmask"][1:]
            elif kind == "alone":
                del msg[f"{t}.decision"]
        return msg
    return change


@pytest.mark.parametrize("kind,field", [("drop own", "'level_nodes'"), ("not open", "'level_nodes'"),
                                        ("forged decision", "'decision'"), ("wide mask", "'child_fmask'"),
                                        ("few masks", "'child_fmask'"), ("alone", "'decision'")])
def test_a_partition_that_applies_its_level_is_checked(tmp_path, monkeypatch, kind, field):
    """With two parties the party without the labels applies a level it won
    splits of itself (the label holder's bits and the children's masks come
    with its partition): each of those fields is checked."""
    hostile(monkeypatch, messages.GROW, _ahead(kind), to=1, times=100)
    refused(tmp_path, field, rank=1, exc_type=None, **dict(PAILLIER, max_depth=4))


# ---------------------------------------------------------------------------
# B9, B10: the first tree to grow, the trees a batch stores
# ---------------------------------------------------------------------------
def _party_trees(md, rank):
    folder = os.path.join(md, "party-%d" % rank, "trees")
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


def test_a_restart_from_tree_zero_keeps_the_checkpoint(tmp_path, monkeypatch):
    md = str(tmp_path / "m")
    run_vertical("train", _frames(), model_dir=md, **dict(OPTS, n_estimators=3))
    kept = _party_trees(md, 1)
    assert len(kept) == 3
    hostile(monkeypatch, protocol.SETUP, lambda m, d: dict(m, start=0))
    refused(tmp_path, "restarts training from tree 0", exc_type="InputError",
            **dict(OPTS, n_estimators=3, resume=True))
    assert _party_trees(md, 1) == kept and _party_trees(md, 2) == kept


@pytest.mark.parametrize("start", [1, -1, "0", 0.0])
def test_start_must_be_a_tree_the_party_has_reached(tmp_path, monkeypatch, start):
    hostile(monkeypatch, protocol.SETUP, lambda m, d: dict(m, start=start))
    refused(tmp_path, "'start'")


def test_commit_stores_the_batch_being_grown(tmp_path, monkeypatch):
    def change(msg, dest):
        out = {"op": msg["op"], "trees": msg["trees"] + 7}
        for k, v in msg.items():
            if k not in ("op", "trees"):
                t, _, rest = k.partition(".")
                out[f"{int(t) + 7}.{rest}"] = v
        return out
    hostile(monkeypatch, messages.COMMIT, change, to=1)
    refused(tmp_path, "a commit must store trees 0 to at most 0", rank=1, tree_batch=1)
    assert _party_trees(str(tmp_path / "m"), 1) == []


def test_a_stored_tree_is_not_grown_again(tmp_path, monkeypatch):
    """After tree 0 is stored, the next batch may not reopen it."""
    def change(msg, dest):
        if msg["trees"].tolist() != [1]:
            return msg
        out = {"op": msg["op"], "trees": np.array([0])}
        out.update({"0." + k.partition(".")[2]: v for k, v in msg.items() if k not in ("op", "trees")})
        return out
    hostile(monkeypatch, messages.GROW, change, to=1, times=100)
    refused(tmp_path, "outside the batch being grown (1 to 1)", rank=1, tree_batch=1)
    assert _party_trees(str(tmp_path / "m"), 1) == ["tree-00000.npz"]


def test_batch_keys_must_name_its_trees(tmp_path, monkeypatch):
    hostile(monkeypatch, messages.GROW, lambda m, d: dict(m, **{"x.nodes": np.zeros(1)}), to=1)
    refused(tmp_path, "names no tree of the message", rank=1)


# ---------------------------------------------------------------------------
# C1, C2: ID alignment
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["duplicate", "outside", "float", "empty"])
def test_aligned_positions_are_distinct_rows_of_the_party(tmp_path, monkeypatch, kind):
    def change(msg, dest):
        p = msg["positions"]
        msg["positions"] = {"duplicate": np.concatenate((p[:-1], p[:1])), "outside": p + 1000,
                            "float": p.astype(np.float64), "empty": p[:0]}[kind]
        return msg
    hostile(monkeypatch, alignment.ALIGN, change, to=1)
    refused(tmp_path, "'positions'", rank=1)


def test_the_lead_seals_the_secret_for_exactly_the_other_parties(tmp_path, monkeypatch):
    frames = _frames()
    frames.append(frames[0][["id"]].assign(g=np.arange(len(frames[0])) % 5))
    hostile(monkeypatch, alignment.GROUP_LEAD, lambda m, d: dict(m, peers=[2]))
    refused(tmp_path, "'peers'", rank=1, frames=frames)


# ---------------------------------------------------------------------------
# C7: the label holder's Paillier key, relayed by the master
# ---------------------------------------------------------------------------
def test_a_relayed_key_has_the_configured_length(tmp_path, monkeypatch):
    short, _ = P.generate_keypair(256, insecure=True)
    hostile(monkeypatch, protocol.SETUP, lambda m, d: dict(m, public_key=short.to_bytes()), to=1)
    refused(tmp_path, "key_length", exc_type="InputError", rank=1, **PAILLIER)


def test_the_label_holder_keeps_its_own_key(tmp_path, monkeypatch):
    """A master that hands the label holder another public key in the set-up
    (to make it work under a key the master holds) is refused."""
    other, _ = P.generate_keypair(512, insecure=True)
    hostile(monkeypatch, protocol.SETUP, lambda m, d: dict(m, public_key=other.to_bytes()), to=2)
    refused(tmp_path, "another public key than this party's own", exc_type="InputError", rank=2, **PAILLIER)


def test_the_label_holder_is_the_one_that_holds_the_labels(tmp_path, monkeypatch):
    hostile(monkeypatch, protocol.SETUP, lambda m, d: dict(m, label_party=1), to=2)
    refused(tmp_path, "'label_party'", rank=2, **PAILLIER)


# ---------------------------------------------------------------------------
# C8: the label holder's decision (both encrypted modes)
# ---------------------------------------------------------------------------
def _decide(change):
    def edit(msg, dest):
        for key in _tree_keys(msg, "op"):
            if msg[key] == "decide":
                change(msg, key.split(".")[0])
        return msg
    return edit


def _shift(field, by):
    def change(msg, t):
        msg[f"{t}.{field}"] = msg[f"{t}.{field}"] + by
    return change


def _drop_cipher(msg, t):
    # a party's sealed sums cut short: the master cannot drop a ciphertext unnoticed
    msg[f"{t}.sealed"] = msg[f"{t}.sealed"][1:]
    msg[f"{t}.sealed_len"] = msg[f"{t}.sealed_len"] - np.eye(1, msg[f"{t}.sealed_len"].size, dtype=np.int64)[0]


def _forge_margins(msg, t):
    msg[f"{t}.margins"] = np.zeros((1, 3))


DECIDE_CASES = [
    (_shift("cand", 1), "'cand'"),                         # not open leaves of the tree
    (_shift("pair_party", 1), "pairs name a party"),       # the label holder's own or no party
    (_shift("pair_feat", 7), "features outside party 1's columns"),
    (_drop_cipher, "'sums' payload from rank 1"),          # sums cut short
    (_shift("derive_node", 1000), "'derive_node'"),
    (_forge_margins, "may not hold 'margins'"),
]


@pytest.mark.parametrize("mode", ["vertical", "vertical_boost"])
@pytest.mark.parametrize("change,field", DECIDE_CASES)
def test_the_decision_is_asked_for_this_levels_requests_only(tmp_path, monkeypatch, mode, change, field):
    frames = _frames(n=200) if mode == "vertical" else _boost_frames()
    hostile(monkeypatch, messages.GROW, _decide(change), to=2, times=100)
    # per-tree features: children share their parent's, so the label holder derives sums
    extra = {"feature_sampling": "tree", "max_features": None} if mode == "vertical" else {}
    refused(tmp_path, field, rank=2, frames=frames, mode=mode, exc_type=None, **dict(PAILLIER, max_depth=4),
            **extra)


def test_the_label_holder_applies_only_the_splits_it_decided(tmp_path, monkeypatch):
    def change(msg, dest):
        for key in _tree_keys(msg, "split_nodes"):
            msg[key] = msg[key][:-1]
        return msg
    hostile(monkeypatch, messages.APPLY, change, to=2, times=20)
    refused(tmp_path, "'split_nodes'", rank=2, **PAILLIER)


# ---------------------------------------------------------------------------
# C9: encrypted boosting: the round's messages
# ---------------------------------------------------------------------------
BOOST = dict(PAILLIER, mode="vertical_boost", n_estimators=3, max_depth=3)


def _boost_frames():
    return [f.assign(y=(f["y"] > 0).astype(int)) if "y" in f else f for f in _frames(n=150)]


@pytest.mark.parametrize("change,field", [
    (lambda m, d: dict(m, round=5), "'round'"),
    (lambda m, d: dict(m, margins=np.zeros((1, 150, 1))), "may not hold 'margins'"),   # the old loss oracle
    (lambda m, d: dict(m, losses=True), "may not hold 'losses'"),
    (lambda m, d: dict(m, final="yes"), "'final'"),
    (lambda m, d: dict(m, leaves=np.zeros((1, 150), dtype=np.int32)), "'leaves'"),
    (lambda m, d: dict(m, stored_leaves=np.zeros((3, 150), dtype=np.int32)), "'stored_leaves'"),
])
def test_a_rounds_gradients_are_asked_for_in_order_and_nothing_else(tmp_path, monkeypatch, change, field):
    from fedforest.vertical.boost import encrypted_gradients as EG
    hostile(monkeypatch, EG.GRADIENTS, change, to=2, times=1)
    refused(tmp_path, field, rank=2, frames=_boost_frames(), **BOOST)


@pytest.mark.parametrize("kind", ["flip", "drop", "replay"])
def test_a_rounds_leaf_sets_reach_the_label_holder_sealed(tmp_path, monkeypatch, kind):
    """With a subsample every row's leaf of the last round comes from the
    parties' leaf sets, sealed for the label holder: a master that alters
    them, drops them, or passes one party's as another's (a way to move the
    margins and read the label holder's best round) stops the job."""
    from fedforest.vertical.boost import encrypted_gradients as EG
    earlier = {}

    def change(msg, dest):
        if msg.get("sealed") is not None and msg["sealed"].size:
            if kind == "flip":
                msg["sealed"] = _flip(msg["sealed"])
            elif kind == "drop":
                for k in ("sealed", "sealed_from", "sealed_len"):
                    del msg[k]
            elif earlier:     # the leaf sets of an earlier round again
                msg.update(earlier)
            else:
                earlier.update((k, msg[k]) for k in ("sealed", "sealed_from", "sealed_len"))
        return msg
    hostile(monkeypatch, EG.GRADIENTS, change, to=2, times=3)
    field = "leaf sets" if kind == "drop" else "leaf_sets"
    refused(tmp_path, field, rank=2, exc_type=None, frames=_boost_frames(), subsample=0.8, **BOOST)


@pytest.mark.parametrize("field,value,to,match", [
    ("output", 3, 2, "'output'"),                      # one output in binary boosting
    ("grad_ct", np.zeros((3, 128), dtype=np.uint8), 1, "'grad_ct'"),
])
def test_a_trees_first_message_is_checked(tmp_path, monkeypatch, field, value, to, match):
    def change(msg, dest):
        for key in _tree_keys(msg, field):
            msg[key] = value
        return msg
    hostile(monkeypatch, messages.GROW, change, to=to, times=1)
    refused(tmp_path, match, rank=to, frames=_boost_frames(), **BOOST)


def test_stop_keeps_whole_stored_rounds(tmp_path, monkeypatch):
    from fedforest.vertical.boost import roles as boost_roles
    hostile(monkeypatch, protocol.DONE, lambda m, d: {"op": boost_roles.STOP, "keep": 99}, to=2)
    refused(tmp_path, "'keep'", rank=2, frames=_boost_frames(), **BOOST)


def test_stored_leaf_sets_only_before_growth_resumes(tmp_path, monkeypatch):
    hostile(monkeypatch, protocol.DONE, lambda m, d: {"op": protocol.LEAF_SETS}, to=1)
    refused(tmp_path, "asked for only before growth resumes", rank=1, frames=_boost_frames(), **BOOST)


# ---------------------------------------------------------------------------
# C10: memory is each party's own
# ---------------------------------------------------------------------------
def test_a_batch_larger_than_the_partys_own_bound_is_refused(tmp_path, monkeypatch):
    from fedforest.vertical.forest import master
    monkeypatch.setattr(master, "batch_limits", lambda cfg, infos, n, b: (None, 50))
    refused(tmp_path, "outside the batch being grown", tree_batch=1, n_estimators=4)


def test_the_master_sizes_batches_within_every_partys_bound():
    from types import SimpleNamespace
    from fedforest.vertical.job_master import batch_limits
    cfg = SimpleNamespace(tree_batch=None, batch_memory_mb=4096)
    infos = {1: {"tree_batch": None, "batch_memory_mb": 4096}, 2: {"tree_batch": 3, "batch_memory_mb": 4096}}
    assert batch_limits(cfg, infos, 100, 1000) == (3, 3)
    infos[2] = {"tree_batch": None, "batch_memory_mb": 1}   # 1 MiB: 10 trees of 100 kB
    assert batch_limits(cfg, infos, 100, 100 * 1024) == (None, 10)


def test_label_holder_encrypts_for_the_configured_draws(tmp_path, monkeypatch):
    hostile(monkeypatch, protocol.ENCRYPT_LABELS, lambda m, d: dict(m, n_total=10 ** 6))
    refused(tmp_path, "'n_total'", rank=2, **PAILLIER)


# ---------------------------------------------------------------------------
# A5, A9: prediction
# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    md = str(tmp_path_factory.mktemp("trained") / "m")
    run_vertical("train", _frames(), model_dir=md, **OPTS)
    return md


def _copy_model(trained, tmp_path):
    import shutil
    shutil.copytree(trained, tmp_path / "m")


@pytest.mark.parametrize("field,value", [("tree", 9), ("tree", -1), ("node", 10 ** 6), ("node", "leaf"),
                                         ("node", "scalar"), ("rows", "outside"), ("rows", "float"),
                                         ("sizes", "short"), ("sizes", "negative")])
def test_route_names_an_own_split_and_aligned_rows(tmp_path, monkeypatch, trained, field, value):
    _copy_model(trained, tmp_path)

    def change(msg, dest):
        if value == "leaf":
            t = model_files.read_trees(os.path.join(trained, "party-%d" % dest), 2)[int(msg["tree"][0])]
            msg["node"][0] = int(np.flatnonzero(t["feature"] == -2)[0])
        elif value == "scalar":
            msg["node"] = int(msg["node"][0])
        elif value == "outside":
            msg["rows"] = msg["rows"] + 500
        elif value == "float":
            msg["rows"] = msg["rows"].astype(np.float64)
        elif value == "short":
            msg["sizes"] = msg["sizes"] - 1
        elif value == "negative":
            msg["sizes"] = np.concatenate(([-1], msg["sizes"][1:]))
        else:
            msg[field] = np.full_like(msg[field], value)
        return msg
    hostile(monkeypatch, protocol.ROUTE, change)
    named = "is not a split of this party" if value == "leaf" else repr(field)
    refused(tmp_path, named, command="predict", predict_method="classical",
            output=str(tmp_path / "m" / "out.csv"))


def test_predictions_go_to_the_result_party_only(tmp_path, monkeypatch, trained):
    _copy_model(trained, tmp_path)
    orig = base.Comm.exchange

    def exchange(self, msgs):
        if self.rank == 0 and any(m.get("op") == protocol.RESULT for m in msgs.values()):
            msgs = {2: next(iter(msgs.values()))}
        return orig(self, msgs)
    monkeypatch.setattr(base.Comm, "exchange", exchange)
    refused(tmp_path, "result_party", rank=2, command="predict",
            output=str(tmp_path / "m" / "out.csv"))
    assert not os.path.exists(tmp_path / "m" / "out.csv")


def _damage(folder, kind):
    path = os.path.join(folder, "trees", "tree-00001.npz")
    with np.load(path) as z:
        t = {k: z[k].copy() for k in z.files}
    split = int(np.flatnonzero(t["children_left"] >= 0)[-1])
    if kind == "column":
        t["feature"][split] = 2
    elif kind == "cycle":
        t["children_left"][split] = split
    elif kind == "two parents":
        t["children_left"][0] = t["children_left"][split]
    elif kind == "out of range":
        t["children_right"][split] = t["feature"].size + 3
    elif kind == "leaf column":
        t["feature"][int(np.flatnonzero(t["children_left"] < 0)[0])] = 0
    elif kind == "short":
        t["threshold"] = t["threshold"][:-1]
    elif kind == "deep":   # a chain deeper than max_depth = 3
        n = 11
        t = {"children_left": np.array([1, -1, 3, -1, 5, -1, 7, -1, 9, -1, -1], dtype=np.int32),
             "children_right": np.array([2, -1, 4, -1, 6, -1, 8, -1, 10, -1, -1], dtype=np.int32),
             "feature": np.where(np.arange(n) % 2 == 0, 0, -2).astype(np.int32),
             "threshold": np.zeros(n), "missing_left": np.zeros(n, dtype=np.uint8)}
        t["feature"][[9, 10]] = -2
        t["feature"][8] = 0
    with open(path, "wb") as fh:
        np.savez(fh, **t)


@pytest.mark.parametrize("kind", ["column", "cycle", "two parents", "out of range", "leaf column",
                                  "short", "deep"])
def test_damaged_partial_tree_is_refused_before_prediction(tmp_path, trained, kind):
    _copy_model(trained, tmp_path)
    _damage(str(tmp_path / "m" / "party-1"), kind)
    err = refused(tmp_path, "tree-00001.npz", exc_type="InputError", rank=1, command="predict",
                  output=str(tmp_path / "m" / "out.csv"))
    assert "party 1 model" in err.remote_message


def test_partial_tree_check_accepts_every_trained_tree(trained):
    folder = os.path.join(trained, "party-1")
    m = model_files.read_manifest(folder)
    for t in model_files.read_trees(folder, m["n_trees"], n_columns=2, max_depth=3):
        assert t["feature"].dtype == np.int32


# ---------------------------------------------------------------------------
# The splitter's state machine, driven directly
# ---------------------------------------------------------------------------
def _splitter(n=40, bootstrap=False):
    rng = np.random.default_rng(0)
    X = np.round(rng.normal(size=(n, 3)), 1)
    y = (X[:, 0] > 0).astype(np.int32)
    params = validate(ForestParams(n_estimators=2, max_depth=3, bootstrap=bootstrap, max_features=None),
                      "classification")
    settings = SplitSettings(params, n, True, 2, 3)
    sp = PartySplitter(X, settings, PlainLabels(y, True, 2))
    sp.count_total, sp.count_max, sp.class_weighted = n, 1, False
    return sp


def _begin(n=40):
    return {"counts": np.ones(n, dtype=np.uint8), "class_weight": np.empty(0)}


def _grow(sub, t=0, op=messages.GROW):
    return pack_batch(op, [(t, sub)])


def test_splitter_takes_the_split_only_from_its_own_search():
    """A plain party never takes a feature or bin from the master."""
    sp = _splitter()
    sp.handle_batch(_grow(dict(_begin(), op="find", nodes=np.zeros(1, np.int32),
                               fmask=np.ones((1, 3), np.uint8))))
    with pytest.raises(ProtocolError, match="may not hold 'bin', 'feature', 'missing_left'"):
        sp.handle_batch(_grow({"op": "partition", "nodes": np.zeros(1, np.int32),
                               "feature": np.array([99], np.int32), "bin": np.array([0], np.int32),
                               "missing_left": np.array([0], np.uint8)}))


@pytest.mark.parametrize("sequence,match", [
    ([{"op": "find", "nodes": np.zeros(1, np.int32), "fmask": np.ones((1, 3), np.uint8)}],
     "must hold 'counts'"),
    ([dict(_begin(), op="find", nodes=np.zeros(1, np.int32), fmask=np.ones((1, 3), np.uint8)),
      dict(_begin(), op="find", nodes=np.zeros(1, np.int32), fmask=np.ones((1, 3), np.uint8))],
     "for a tree that has begun"),
    ([dict(_begin(), op="find", nodes=np.zeros(1, np.int32), fmask=np.ones((1, 3), np.uint8)),
      {"op": "find", "nodes": np.zeros(1, np.int32), "fmask": np.ones((1, 3), np.uint8)}],
     "a second 'find'"),
    ([dict(_begin(), op="partition", nodes=np.zeros(1, np.int32))], "without a 'find'"),
    ([dict(_begin(), op="find", nodes=np.zeros(1, np.int32), fmask=np.zeros((1, 3), np.uint8)),
      {"op": "partition", "nodes": np.zeros(1, np.int32)}], "found no split"),
    ([dict(_begin(), op="find", nodes=np.empty(0, np.int32), fmask=np.ones((0, 3), np.uint8),
           split_nodes=np.array([3], np.int32), bits=np.zeros(5, np.uint8))], "'split_nodes'"),
    ([dict(_begin(), op="find", nodes=np.empty(0, np.int32), fmask=np.ones((0, 3), np.uint8),
           split_nodes=np.zeros(1, np.int32), bits=np.zeros(4, np.uint8))], "'bits'"),
    ([dict(_begin(), op="find", nodes=np.empty(0, np.int32), fmask=np.ones((0, 3), np.uint8),
           split_nodes=np.zeros(1, np.int32), bits=np.zeros(5, np.uint8))], "min_samples_leaf"),
    ([dict(_begin(), op="find", nodes=np.zeros(1, np.int32), fmask=np.ones((1, 3), np.uint8)),
      {"op": "partition", "nodes": np.zeros(1, np.int32)},
      (messages.COMMIT, {"op": "finish", "importance": np.zeros(1)})],
     "'finish' before the partition"),
    ([dict(_begin(), op="find", nodes=np.zeros(1, np.int32), fmask=np.ones((1, 3), np.uint8)),
      {"op": "partition", "nodes": np.zeros(1, np.int32)},
      {"op": "finish", "importance": np.zeros(1)}], "a 'grow' message holds a 'finish'"),
    ([dict(_begin(), op="find", nodes=np.zeros(1, np.int32), fmask=np.ones((1, 3), np.uint8),
           class_weight=np.array([1.0, np.nan]))], "'class_weight'"),
    ([{"op": "explode"}], "unknown tree message"),
    ([(messages.APPLY, dict(_begin(), op="find", nodes=np.zeros(1, np.int32),
                           fmask=np.ones((1, 3), np.uint8)))], "an? 'apply' message holds a 'find'"),
    ([dict(_begin(), op="find", nodes=np.zeros(1, np.int32), fmask=np.ones((1, 3), np.uint8)),
      {"op": "apply", "split_nodes": np.zeros(1, np.int32), "bits": np.zeros(5, np.uint8)}],
     "a 'grow' message holds a 'apply'"),
    ([dict(_begin(), op="find", nodes=np.zeros(1, np.int32), fmask=np.ones((1, 3), np.uint8)),
      {"op": "partition", "nodes": np.zeros(1, np.int32)},
      (messages.APPLY, {"op": "apply"})], "'split_nodes', 'bits' travel together"),
])
def test_splitter_refuses_messages_out_of_order(sequence, match):
    sp = _splitter()
    with pytest.raises(ProtocolError, match=match):
        for m in sequence:
            op, m = m if isinstance(m, tuple) else (messages.GROW, m)
            sp.handle_batch(_grow(m, op=op))


def _halves(n):
    return np.packbits(np.arange(n) % 2 == 0)


def test_splitter_refuses_splits_beyond_max_depth():
    sp = _splitter()
    none = {"op": "find", "nodes": np.empty(0, np.int32), "fmask": np.ones((0, 3), np.uint8)}
    sp.handle_batch(_grow(dict(_begin(), **none)))
    # the first child of each split is split again: 40, 20, 10 rows at depth 0, 1, 2
    for node, rows in ((0, 40), (1, 20), (3, 10)):
        sp.handle_batch(_grow(dict(none, split_nodes=np.array([node], np.int32), bits=_halves(rows))))
    with pytest.raises(ProtocolError, match="max_depth is 3"):
        sp.handle_batch(_grow(dict(none, split_nodes=np.array([5], np.int32), bits=_halves(5))))


def test_splitter_refuses_a_commit_that_leaves_a_tree_open():
    sp = _splitter()
    sp.handle_batch(_grow(dict(_begin(), op="find", nodes=np.zeros(1, np.int32),
                               fmask=np.ones((1, 3), np.uint8))))
    with pytest.raises(ProtocolError, match="leaves trees \\[0\\] unfinished"):
        sp.handle_batch(_grow({"op": "finish", "importance": np.zeros(1)}, t=1, op=messages.COMMIT))


def test_a_commit_may_not_leave_a_begun_tree_unfinished(tmp_path, monkeypatch):
    """A batch smaller than the party's bound is fine; a commit that drops a
    begun tree is not."""
    def change(msg, dest):
        keep = msg["trees"][:-1]
        out = {"op": msg["op"], "trees": keep}
        out.update({k: v for k, v in msg.items() if k not in ("op", "trees")
                    and int(k.partition(".")[0]) in keep.tolist()})
        return out
    hostile(monkeypatch, messages.COMMIT, change, to=1)
    refused(tmp_path, "the commit leaves trees", rank=1, tree_batch=2)
    assert _party_trees(str(tmp_path / "m"), 1) == []


def test_a_commit_and_grow_message_must_hold_both_parts(tmp_path, monkeypatch):
    hostile(monkeypatch, messages.FUSED, lambda m, d: dict(m, grow=dict(m["grow"], op=messages.COMMIT)), to=2)
    refused(tmp_path, "the 'grow' part of a commit and grow message must be a 'grow' message", rank=2,
            tree_batch=1)
    assert _party_trees(str(tmp_path / "m"), 2) == []
