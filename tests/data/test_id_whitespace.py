"""IDs are matched exactly as written: a party whose IDs begin or end with
whitespace says so on its own output with a few of them (the whitespace
visible), and tells the master only how many; the master's "no ID is
shared" error names that count per party, and never an ID."""
import numpy as np
import pandas as pd
import pytest

from fedforest.crypto.ids import IdTexts
from fedforest.data import alignment
from fedforest.errors import InputError, RemoteError
from fedforest.jobs import run_vertical
from fedforest.transport.base import ProtocolError

N = 40
IDS = [str(842302 + i) for i in range(N)]


def parties(ids2):
    rng = np.random.default_rng(0)
    a = rng.normal(size=N)
    return [pd.DataFrame({"id": IDS, "a": a, "label": (a > 0).astype(int)}),
            pd.DataFrame({"id": ids2, "b": rng.normal(size=N)})]


def train(tmp_path, ids2, tmp_name="p2.csv"):
    p1, p2 = parties(ids2)
    path = tmp_path / tmp_name
    p2.to_csv(path, index=False)
    return run_vertical("train", [p1, str(path)], task="classification", label_column="label",
                        id_column="id", model_dir=str(tmp_path / "model"), n_estimators=2, random_state=0)


def message(info):
    return getattr(info.value, "remote_message", str(info.value))


def test_trailing_spaces_are_counted_per_party_and_shown_by_that_party_only(tmp_path, capsys):
    with pytest.raises((InputError, RemoteError)) as info:
        train(tmp_path, [i + " " for i in IDS])
    msg = message(info)
    assert msg.startswith("ID alignment: no ID is shared by all parties: party 2: 40 of its 40 IDs "
                          "begin or end with whitespace"), msg
    assert "remove the whitespace from the ID column of party 2" in msg
    assert not any(i in msg for i in IDS)                  # the master names no ID
    err = capsys.readouterr().err
    assert "party 2: warning: 40 of its 40 IDs begin or end with whitespace, e.g. '842302 ', '842303 ', " \
           "'842304 ', ..." in err, err
    assert "party 1: warning" not in err


def test_ids_that_differ_otherwise_get_the_exact_match_hint(tmp_path, capsys):
    with pytest.raises((InputError, RemoteError)) as info:
        train(tmp_path, ["0" + i for i in IDS])
    msg = message(info)
    assert "no party's IDs begin or end with whitespace" in msg and "matched exactly as written" in msg
    assert "warning" not in capsys.readouterr().err


def test_spaced_ids_are_found_by_any_unicode_whitespace():
    texts = ["a", " a", "a\t", "a\u00a0", "a b", "\u2003b", ""]
    assert alignment.spaced_ids(IdTexts.from_texts(texts)).tolist() == [1, 2, 3, 5]
    assert alignment.spaced_ids(np.array(texts)).tolist() == [1, 2, 3, 5]


class _Master:
    """The master's side of one party's alignment, scripted: the party leads
    alone, so that what it sends is all a test needs to see."""

    def __init__(self, n):
        self.script = [{"op": alignment.GROUP_PUBLIC}, {"op": alignment.GROUP_LEAD, "peers": []},
                       {"op": alignment.HASH_IDS},
                       lambda: {"op": alignment.ALIGN, "positions": np.arange(n),
                                "peer_keys": self.sent[0]["public"].reshape(1, -1)}]
        self.sent = []

    def recv(self, src):
        msg = self.script.pop(0)
        return msg() if callable(msg) else msg

    def send(self, dst, msg):
        self.sent.append(msg)


def test_the_master_receives_the_count_not_the_ids(capsys):
    texts = ["patient-0001 ", "patient-0002", "\tpatient-0003"]
    master = _Master(3)
    alignment.party_align(master, 1, IdTexts.from_texts(texts))
    sent = master.sent[-1]
    assert set(sent) == {"digests", "n_spaced_ids"} and sent["n_spaced_ids"] == 2
    sent_bytes = b"".join(np.asarray(v).tobytes() for m in master.sent for v in m.values())
    assert not any(t.strip().encode() in sent_bytes for t in texts)
    assert "party 1: warning: 2 of its 3 IDs begin or end with whitespace, e.g. 'patient-0001 ', " \
           "'\\tpatient-0003'" in capsys.readouterr().err


@pytest.mark.parametrize("bad", [-1, 4, True, 1.0, "2", None])
def test_the_master_refuses_a_count_that_is_not_one(bad):
    with pytest.raises(ProtocolError, match="party 2 sent 'n_spaced_ids'"):
        alignment._spaced_count(bad, 3, 2)
    assert alignment._spaced_count(np.int64(3), 3, 2) == 3
