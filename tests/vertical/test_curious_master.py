"""A curious master: it follows the protocol but keeps everything it receives
and holds (its transcript, its model files, its summary, any key it made, any
randomness it sent) and tries the known ways to read the labels from them:

* decrypting the label holder's row ciphertexts with a private key of its own;
* dividing out encryption factors it made itself (``c / f = 1 + m n mod n²``);
* reading label statistics (gains, node sums, leaf values, margins, losses,
  grid steps) from the floating-point values it receives or stores.

In both encrypted modes every attack must come back empty: the label holder
makes the key (on its own rank), encrypts with its own randomness and keeps
every label statistic.  Each attack is also run against a deliberately
leaky transcript (the master holding the key, or a float statistic) to show
that it would have found the labels."""
import threading

import gmpy2
import numpy as np
import pytest

from fedforest.crypto import paillier as P
from fedforest.jobs import run_job
from fedforest.transport import base
from fedforest.vertical import model_files
from fedforest.vertical.boost.params import BoostParams
from fedforest.vertical.boost.boosting import holdout

from _util import make_table, party_frames

KEY = dict(key_length=512, insecure_key=True)
LABEL_RANK = 2


def _frames(task, n_classes, seed=5, n=160):
    X, y = make_table(task, n_classes, seed, n, 9, 0.05)
    return party_frames(X, y, [[0, 1, 2], [3, 4, 5], [6, 7, 8]], label_party=LABEL_RANK - 1), y


class Transcript:
    """What rank 0 receives, sends and makes during a job."""

    def __init__(self, monkeypatch):
        self.received, self.sent, self.keys = [], [], []
        orig_send = base.Comm.send
        orig_keygen = P.generate_keypair

        def send(comm, dest, msg):
            if dest == 0:
                self.received.append((comm.rank, msg))
            elif comm.rank == 0:
                self.sent.append((dest, msg))
            return orig_send(comm, dest, msg)

        def keygen(*args, **kwargs):
            public, private = orig_keygen(*args, **kwargs)
            self.keys.append((threading.current_thread().name, public, private))
            return public, private

        monkeypatch.setattr(base.Comm, "send", send)
        monkeypatch.setattr(P, "generate_keypair", keygen)

    def master_keys(self):
        """The private keys made on the master's rank (the main thread here)."""
        return [private for name, _, private in self.keys if not name.startswith("fedforest-rank-")]


def _values(obj, path=""):
    """(path, value) of every array inside a message."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _values(v, f"{path}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _values(v, f"{path}[{i}]")
    elif isinstance(obj, np.ndarray):
        yield path, obj


def _ciphertexts(messages, width):
    """Every big-endian ciphertext block of ``width`` bytes in the messages."""
    out = []
    for _, msg in messages:
        for _, a in _values(msg):
            if a.dtype == np.uint8 and a.ndim == 2 and a.shape[1] == width:
                out += [gmpy2.mpz(int.from_bytes(bytes(row), "big")) for row in a]
    return out


def _layout(tr):
    """The slot layout the master relays in its set-up messages (width, statistics per row)."""
    for _, msg in tr.sent:
        spec = msg.get("spec") if isinstance(msg, dict) else None
        if isinstance(spec, dict):
            return spec["width"], spec["n_stats"], spec["key_length"]
    return None


def _recovered(plaintexts, ys, layout):
    """The largest share of the labels a reading of the decrypted row
    plaintexts gets right, for each candidate label vector of ``ys`` (all rows,
    or the training rows of a job with a validation share): the class of the
    slot holding the 1, or (targets, gradients) all of them when the second
    slot follows the labels."""
    return max(_share(plaintexts, y, layout) for y in ys)


def _share(plaintexts, y, layout):
    n = y.shape[0]
    if layout is None or len(plaintexts) < n:
        return 0.0
    width, n_stats, key_length = layout
    slots = P.Slots(width, key_length)
    try:
        rows = np.array([slots.unpack(int(m), n_stats) for m in plaintexts[:n]], dtype=np.float64)
    except Exception:   # not row plaintexts of this layout
        return 0.0
    if n_stats == len(np.unique(y)) and n_stats != 3 or np.all(np.isin(rows, (0, 1))):
        codes = np.unique(y, return_inverse=True)[1]
        return float(np.mean(np.argmax(rows, axis=1) == codes))
    corr = np.corrcoef(rows[:, 1], y)[0, 1]
    return 1.0 if np.isfinite(corr) and abs(corr) > 0.9 else 0.0


def decrypt_attack(tr, ys, width):
    """The share of labels read by decrypting the received row ciphertexts with a key the master holds."""
    best = 0.0
    for private in tr.master_keys():
        cts = [c for c in _ciphertexts(tr.received + [(0, m) for _, m in tr.sent], width)
               if 0 < c < private.public.nsq]
        best = max(best, _recovered([private.decrypt(c) % private.public.n for c in cts], ys, _layout(tr)))
    return best


def factor_attack(tr, ys, width):
    """The share of labels read by dividing received ciphertexts by encryption factors the master sent."""
    factors = set()
    for _, msg in tr.sent:
        for path, a in _values(msg):
            if "random" in path and a.dtype == np.uint8 and a.ndim == 2:
                factors |= {gmpy2.mpz(int.from_bytes(bytes(row), "big")) for row in a}
    if not factors:
        return 0.0
    keys = [public for _, public, _ in tr.keys]
    best = 0.0
    for public in keys:
        n, nsq = public.n, public.nsq
        plain = []
        for c in _ciphertexts(tr.received, public.ciphertext_bytes):
            for f in factors:
                u = c * gmpy2.invert(f, nsq) % nsq
                if u % n == 1:
                    plain.append((u - 1) // n)
                    break
        best = max(best, _recovered(plain, ys, _layout(tr)))
    return best


def float_statistics(tr, master_dir):
    """Floating-point arrays the master receives or stores: gains, sums, leaf
    values, margins, losses and grid steps are all floats; what it needs
    (bits, counts, ids, ciphertexts) is not."""
    found = [f"from rank {r}: {path}" for r, msg in tr.received for path, a in _values(msg)
             if a.dtype.kind == "f" and a.size > 1]
    manifest = model_files.read_manifest(master_dir)
    trees = model_files.read_trees(master_dir, manifest["n_trees"])
    found += [f"model file: {k}" for t in trees for k, a in t.items() if a.dtype.kind == "f"]
    for key in ("classes", "base_margin"):
        if manifest.get(key) is not None or manifest.get("boost", {}).get(key) is not None:
            found.append(f"manifest: {key}")
    return found


JOBS = [
    ("vertical", "classification", 3, {}),
    ("vertical", "regression", 1, {}),
    ("vertical_boost", "classification", 2, {}),
    ("vertical_boost", "regression", 1, {"early_stopping_rounds": 2, "validation_fraction": 0.25}),
]


@pytest.mark.parametrize("mode,task,n_classes,extra", JOBS)
def test_a_curious_master_learns_no_label(tmp_path, monkeypatch, mode, task, n_classes, extra):
    frames, y = _frames(task, n_classes)
    tr = Transcript(monkeypatch)
    summary = run_job("train", frames, mode=mode, task=task, label_column="y", label_privacy="paillier",
                      model_dir=str(tmp_path / "m"), n_estimators=3, max_depth=3, random_state=1, **KEY,
                      **extra)
    assert summary["paillier_key_holder"] == "label_holder"
    # the key pair is made on the label holder's rank, and only there
    assert [name for name, _, _ in tr.keys] == [f"fedforest-rank-{LABEL_RANK}"]
    assert tr.master_keys() == []
    width = tr.keys[0][1].ciphertext_bytes
    assert len(_ciphertexts(tr.received, width)) >= len(y) * 3 // 4   # it does relay the row ciphertexts
    # the labels a reading could be checked against: every row's, or the training rows'
    ys = [y]
    if mode == "vertical_boost":
        ys.append(y[holdout(len(y), BoostParams(**extra), 1)[0]])
    assert decrypt_attack(tr, ys, width) == 0
    assert factor_attack(tr, ys, width) == 0
    assert float_statistics(tr, model_files.party_dir(str(tmp_path / "m"), 0)) == []
    assert not {"validation_loss", "decrypts_per_tree"} & {k for k, v in summary.items() if v is not None}


@pytest.mark.parametrize("task,n_classes", [("classification", 3), ("regression", 1)])
def test_the_attacks_find_labels_where_they_leak(monkeypatch, task, n_classes):
    """The same attacks against a transcript that leaks: a master holding the
    key of the row ciphertexts, or having made their randomness itself."""
    from fedforest.vertical import encrypted_labels as E
    _, y = _frames(task, n_classes)
    public, private = P.generate_keypair(512, insecure=True)
    if task == "classification":
        codes = np.unique(y, return_inverse=True)[1]
        spec = E.EncryptionSpec(True, n_classes, y.size, 512)
    else:
        codes, step, bias = E.regression_grid(y, y.size)
        spec = E.EncryptionSpec(False, 1, y.size, 512, step=step, bias=bias)
    factors = private.randomness(y.size)
    blocks = public.serialize(public.encrypt_with(spec.row_plaintexts(codes), factors))
    tr = Transcript.__new__(Transcript)
    tr.received = [(LABEL_RANK, {"blocks": blocks})]
    tr.sent = [(LABEL_RANK, {"randomness": public.serialize(factors), "spec": spec.to_dict()})]
    tr.keys = [("MainThread", public, private)]
    assert decrypt_attack(tr, [y], public.ciphertext_bytes) == 1.0
    tr.keys = [(f"fedforest-rank-{LABEL_RANK}", public, private)]   # no key on the master
    assert decrypt_attack(tr, [y], public.ciphertext_bytes) == 0
    assert factor_attack(tr, [y], public.ciphertext_bytes) == 1.0
