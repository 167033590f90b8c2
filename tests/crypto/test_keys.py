"""HPKE boxes for the parties' shared ID secret, and the alignment that uses them."""
import numpy as np
import pytest
from cryptography.exceptions import InvalidTag

from fedforest.crypto.keys import KeyPair, seal_to
from fedforest.data import alignment


def test_a_sealed_box_opens_only_with_its_key_and_its_info():
    a, b = KeyPair(), KeyPair()
    box = seal_to(a.public, b"s" * 32, b"fedforest/v1/group-secret/1->2")
    assert a.open_sealed(box, b"fedforest/v1/group-secret/1->2") == b"s" * 32
    assert seal_to(a.public, b"s" * 32, b"x") != seal_to(a.public, b"s" * 32, b"x")   # fresh each time
    with pytest.raises(InvalidTag):
        b.open_sealed(box, b"fedforest/v1/group-secret/1->2")          # another party's key
    with pytest.raises(InvalidTag):
        a.open_sealed(box, b"fedforest/v1/group-secret/1->3")          # re-addressed by the relay
    bad = bytearray(box)
    bad[-1] ^= 1
    with pytest.raises(InvalidTag):
        a.open_sealed(bytes(bad), b"fedforest/v1/group-secret/1->2")


class _Relay:
    """What a party sees of the master during alignment: the master's messages
    are scripted; ``tamper`` alters the sealed box on its way."""

    def __init__(self, script, tamper=False):
        self.script, self.sent, self.tamper = list(script), [], tamper

    def recv(self, src):
        msg = self.script.pop(0)
        return msg(self.sent) if callable(msg) else msg

    def send(self, dst, msg):
        self.sent.append(msg)


def _run_two_parties(tamper=False):
    ids = np.array(["a", "b", "c"])
    def align(sent):
        # with the positions, both parties' public keys (for the payloads they seal for each other)
        return {"op": alignment.ALIGN, "positions": np.arange(3),
                "peer_keys": np.vstack([lead.sent[0]["public"], member.sent[0]["public"]])}
    lead = _Relay([{"op": alignment.GROUP_PUBLIC}, None, {"op": alignment.HASH_IDS}, align])
    member = _Relay([{"op": alignment.GROUP_PUBLIC}, None, {"op": alignment.HASH_IDS}, align])
    # both parties publish their keys first: run each up to that point by hand
    import threading
    results = {}

    def party(relay, rank):
        try:
            alignment.party_align(relay, rank, ids)
            results[rank] = relay.sent[-1]["digests"]
        except Exception as exc:  # noqa: BLE001
            results[rank] = exc

    lead.script[1] = lambda sent: {"op": alignment.GROUP_LEAD, "peers": [2],
                                   "pub2": _wait_public(member)}

    def member_msg(sent):
        box = _wait_box(lead).copy()
        if tamper:
            box[5] ^= 1
        return {"op": alignment.GROUP_MEMBER, "lead": 1, "sealed": box}
    member.script[1] = member_msg
    threads = [threading.Thread(target=party, args=(lead, 1)), threading.Thread(target=party, args=(member, 2))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    _run_two_parties.seen = lead.sent + member.sent    # what the parties sent the master (relay)
    return results


def _wait_public(relay):
    import time
    while not relay.sent:
        time.sleep(0.001)
    return relay.sent[0]["public"]


def _wait_box(relay):
    import time
    while len(relay.sent) < 2:
        time.sleep(0.001)
    return relay.sent[1]["sealed2"]


def test_parties_agree_on_the_id_secret_the_master_only_relays():
    out = _run_two_parties()
    assert np.array_equal(out[1], out[2])              # same keyed hashes: the same secret


def test_a_box_altered_by_the_relay_is_refused_naming_both_parties():
    out = _run_two_parties(tamper=True)
    assert "from rank 1 to rank 2" in str(out[2]) and "failed authentication" in str(out[2])


def test_the_master_intersects_hashes_in_the_first_partys_order():
    """The vectorised intersection against a dictionary reference, for 1-4
    parties with partly shared rows in shuffled orders."""
    from fedforest.transport.base import ProtocolError
    rng = np.random.default_rng(7)
    from fedforest.crypto.ids import DIGEST_BYTES
    universe = rng.integers(0, 256, (80, DIGEST_BYTES), dtype=np.uint8)
    for _ in range(60):
        rows = {r: rng.permutation(80)[:rng.integers(0, 80)] for r in range(1, rng.integers(2, 6))}
        got = alignment.shared_positions({r: alignment._digest_keys(universe[i], r) for r, i in rows.items()}, 1)
        where = {r: {universe[i].tobytes(): p for p, i in enumerate(idx)} for r, idx in rows.items()}
        order = [universe[i].tobytes() for i in rows[1] if all(universe[i].tobytes() in where[r] for r in rows)]
        for r in rows:
            assert got[r].dtype == np.int32      # row numbers below 2^31
            assert got[r].tolist() == [where[r][k] for k in order]
    with pytest.raises(ProtocolError, match="party 2 sent the same ID hash twice"):
        alignment._digest_keys(universe[[0, 1, 0]], 2)
    with pytest.raises(ProtocolError, match=f"party 3 sent 'digests' that are not rows of {DIGEST_BYTES} bytes"):
        alignment._digest_keys(universe[:, :DIGEST_BYTES // 2], 3)


def test_hashes_sharing_a_prefix_are_matched_whole():
    """The master matches 8-byte prefixes, then whole hashes: a first-party
    hash whose prefix only equals another party's hash is not shared, and a
    party holding two hashes with one prefix is matched on whole hashes; both
    as the dictionary reference says."""
    from fedforest.crypto.ids import DIGEST_BYTES
    rng = np.random.default_rng(5)
    universe = rng.integers(0, 256, (300, DIGEST_BYTES), dtype=np.uint8)
    universe[7, :8] = universe[8, :8]          # rows 7 and 8 differ after the prefix
    universe[20, :8] = universe[21, :8]
    rows = {1: rng.permutation(np.r_[30:100, 200:300]), 2: rng.permutation(np.r_[8, 20, 30:250]),
            # party 3's own order puts the unshared row of each prefix pair first
            3: np.r_[7, 8, 21, 20, rng.permutation(np.r_[0:7, 9:20, 22:150])]}
    for r1_extra in ([], [7, 8, 20, 21]):
        r1 = np.r_[rows[1], r1_extra].astype(int)
        case = {1: r1, 2: rows[2], 3: rows[3]}
        got = alignment.shared_positions({r: alignment._digest_keys(universe[i], r) for r, i in case.items()}, 1)
        where = {r: {universe[i].tobytes(): p for p, i in enumerate(idx)} for r, idx in case.items()}
        order = [universe[i].tobytes() for i in r1 if all(universe[i].tobytes() in where[r] for r in case)]
        assert len(order) > 0
        for r in case:
            assert got[r].tolist() == [where[r][k] for k in order]


def test_the_master_holds_two_parties_hashes_at_a_time():
    """Hashes given as functions are taken one party at a time, in rank order:
    when a party's hashes are asked for, no other party's is still alive
    (each is freed once matched; the first party's are kept as their sorted
    prefixes and their suffixes), and the result is the one of hashes given
    all at once."""
    import gc
    import weakref
    from fedforest.crypto.ids import DIGEST_BYTES
    rng = np.random.default_rng(11)
    universe = rng.integers(0, 256, (500, DIGEST_BYTES), dtype=np.uint8)
    rows = {r: rng.permutation(500)[:400] for r in range(1, 6)}
    alive, asked = [], []

    def loader(r):
        def load():
            gc.collect()
            asked.append((r, sum(ref() is not None for ref in alive)))
            keys = alignment._digest_keys(universe[rows[r]], r)
            alive.append(weakref.ref(keys.base if keys.base is not None else keys))
            return keys
        return load

    got = alignment.shared_positions({r: loader(r) for r in rows}, 1)
    assert [r for r, _ in asked] == [1, 2, 3, 4, 5]
    assert max(n for _, n in asked) == 0       # the first party's hashes only as their prefixes and suffixes
    want = alignment.shared_positions({r: alignment._digest_keys(universe[i], r) for r, i in rows.items()}, 1)
    assert all(np.array_equal(got[r], want[r]) for r in rows)


def test_repeated_hashes_are_found_behind_equal_prefixes():
    """The repeat check sorts 8-byte prefixes: rows that share a prefix but
    differ later are distinct, rows equal in full repeat."""
    from fedforest.crypto.ids import DIGEST_BYTES
    from fedforest.transport.base import ProtocolError
    d = np.random.default_rng(3).integers(0, 256, (1000, DIGEST_BYTES), dtype=np.uint8)
    d[10, :8] = d[500, :8]
    assert alignment._digest_keys(d, 2).size == 1000
    d[10] = d[500]
    with pytest.raises(ProtocolError, match="party 2 sent the same ID hash twice"):
        alignment._digest_keys(d, 2)


def _master_guesses(seen, ids):
    """A curious master's attempts at the parties' ID digests from everything it
    relayed (public keys, sealed boxes): every 32-byte window of those bytes,
    their SHA-256, the zero key, and unkeyed hashes of the IDs.  Returns the
    digests of ``ids`` it can compute."""
    import hashlib
    from fedforest.crypto.ids import DIGEST_BYTES, hash_ids
    blobs = [bytes(np.asarray(v, dtype=np.uint8)) for msg in seen for k, v in msg.items()
             if k != "digests" and isinstance(v, np.ndarray)]
    keys = {bytes(32)} | {hashlib.sha256(b).digest() for b in blobs} | \
        {b[i:i + 32] for b in blobs for i in range(0, max(len(b) - 31, 0))}
    guesses = [hash_ids(ids, k) for k in keys]
    for h in (hashlib.sha256, hashlib.md5, hashlib.blake2b):
        guesses.append(np.frombuffer(b"".join(h(str(v).encode()).digest()[:DIGEST_BYTES] for v in ids),
                                     dtype=np.uint8).reshape(len(ids), DIGEST_BYTES))
    return guesses


def test_a_curious_master_cannot_compute_the_id_digests_it_relays():
    """The master sees both parties' public keys, the sealed ID secret and the
    digests: no key it can form from them (nor an unkeyed hash) gives the digests,
    so it cannot test guessed IDs against them."""
    out = _run_two_parties()
    ids = np.array(["a", "b", "c"])
    assert all(not np.array_equal(g, out[1]) for g in _master_guesses(_run_two_parties.seen, ids))


def test_the_curious_master_attack_reads_digests_made_with_a_key_it_can_form(monkeypatch):
    """The attack above has teeth: with a secret the master can form (the zero
    key) it computes the digests of guessed IDs."""
    monkeypatch.setattr(alignment, "random_secret", lambda: bytes(32))
    out = _run_two_parties()
    ids = np.array(["a", "b", "c"])
    assert any(np.array_equal(g, out[1]) for g in _master_guesses(_run_two_parties.seen, ids))
