"""Payloads the parties seal for each other in the encrypted modes.

The master relays every message, but in the encrypted modes what one party
tells another about rows travels sealed end to end
(:meth:`fedforest.transport.base.Comm.seal_for`: AES-256-GCM under keys the
two parties derived from their own X25519 keys at the ID alignment): a
passive party's per-bin sums, row counts and bootstrap weights (to the label
holder), the label holder's decision of a level (to every other party), a
winner's partition bits (to every other party) and the parties' leaf sets
(to the label holder).  Each payload is bound to its field, both parties and
its place (tree and level): the master can neither read it nor forge,
alter, replay or move it without the receiving party stopping the job with
an error naming the field.

What the master routes it reads from plain envelopes: a reply lists its
payloads (``sealed``: their bytes back to back, ``sealed_to``: the party
index each is for, ``sealed_len``: their lengths, ``sealed_field``: their
field's code); a message to a party carries ``sealed``, ``sealed_from`` and
``sealed_len``.
"""
import struct

import numpy as np

from ...crypto.channel import PeerSeal
from ...crypto.keys import KeyPair, pair_keys
from ...transport.base import ProtocolError, decode, encode
from ...tree import partitioner
from ..messages import bad_message, int_array, shown

SUMS = "sums"            # passive party -> label holder: a level's per-bin sums, row counts, weights
DECISION = "decision"    # label holder -> other party: a level's splits, winners, its own bits, the party's splits
BITS = "bits"            # a passive winner -> every other party: its partition bits of a level
LEAF_SETS = "leaf_sets"  # a party -> the label holder: its leaf sets of trees (boosting, prediction)
BINS = "bins"            # passive party -> label holder, at set-up: its features' bin counts and left-out bins
SLOTS = "slots"          # label holder -> passive party (hidden instance space): a level's rows in node slots
FIELDS = (SUMS, DECISION, BITS, LEAF_SETS, BINS, SLOTS)
SETUP = (-1, -1)         # the place of the set-up's payloads
# the places of leaf sets: a boosting round's trees (first tree), the stored trees of a resumed
# run (first tree to grow), a prediction
ROUND_LEAVES, STORED_LEAVES, PREDICTION = -2, -3, (0, -4)
OUT_KEYS = ("sealed", "sealed_to", "sealed_len", "sealed_field")
IN_KEYS = ("sealed", "sealed_from", "sealed_len")


def context(tree, level):
    """A payload's place in the job, bound into its associated data."""
    return struct.pack(">qq", int(tree), int(level))


class Sealer:
    """One party's sealing of payloads for the other parties: ``me`` its
    party index, ``peers`` a :class:`~fedforest.crypto.channel.PeerSeal` per
    other party index (0-based)."""

    def __init__(self, me, peers):
        self.me = int(me)
        self.peers = dict(peers)
        self.n_parties = len(self.peers) + 1

    @classmethod
    def of(cls, comm):
        """The sealer of a party's rank, from the keys of its ID alignment."""
        if len(comm.peers) != comm.size - 2:
            raise ProtocolError("protocol error: no sealed channels with the other parties")
        return cls(comm.rank - 1, {r - 1: seal for r, seal in comm.peers.items()})

    def seal(self, party, field, tree, level, msg):
        """``msg`` (a data-only dict) encoded and sealed for party ``party``, as uint8 bytes."""
        return np.frombuffer(self.peers[party].seal(field, context(tree, level), encode(msg)), dtype=np.uint8)

    def open(self, party, field, tree, level, data):
        """The message party ``party`` sealed for this one under ``field`` at
        this place (an error naming the field when it was forged, altered,
        replayed or moved)."""
        where = f"tree {tree}, level {level}"
        if not (isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ndim == 1) \
                or party not in self.peers:
            raise bad_message(f"the {field!r} payload from party {party + 1} ({where}) is not sealed bytes of "
                              "another party")
        plain = self.peers[party].open(field, context(tree, level), data, where)
        try:
            return decode(bytearray(plain))
        except ProtocolError as exc:
            raise bad_message(f"party {party + 1} sealed a malformed {field!r} payload: {exc}") from None


def local_sealers(n_parties):
    """Sealers of ``n_parties`` parties in one process (tests, single-process runs)."""
    kps = [KeyPair() for _ in range(n_parties)]
    out = []
    for p in range(n_parties):
        peers = {}
        for q in range(n_parties):
            if q != p:
                send, recv = pair_keys(kps[p], kps[q].public, p + 1, q + 1, b"peer")
                peers[q] = PeerSeal(p + 1, q + 1, send, recv)
        out.append(Sealer(p, peers))
    return out


def outgoing(items):
    """A reply's envelope from ``(party, field, bytes)`` items."""
    if not items:
        return {}
    return {"sealed": np.concatenate([b for _, _, b in items]),
            "sealed_to": np.array([p for p, _, _ in items], dtype=np.int32),
            "sealed_len": np.array([b.size for _, _, b in items], dtype=np.int64),
            "sealed_field": np.array([FIELDS.index(f) for _, f, _ in items], dtype=np.uint8)}


def incoming(items):
    """A message's envelope from ``(from party, bytes)`` items."""
    if not items:
        return {"sealed": np.empty(0, np.uint8), "sealed_from": np.empty(0, np.int32),
                "sealed_len": np.empty(0, np.int64)}
    return {"sealed": np.concatenate([b for _, b in items]),
            "sealed_from": np.array([p for p, _ in items], dtype=np.int32),
            "sealed_len": np.array([b.size for _, b in items], dtype=np.int64)}


def cut(data, lengths, who, what):
    """The payloads of an envelope, cut by their lengths."""
    if not (isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ndim == 1):
        raise ValueError(f"{who} sent {shown(data)} as sealed payloads")
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.ndim != 1 or (lengths.size and lengths.min() < 0) or int(lengths.sum()) != data.size:
        raise ValueError(f"{who} sent {what} lengths that do not cut its sealed bytes")
    ends = np.cumsum(lengths)
    return [data[e - n:e] for n, e in zip(lengths.tolist(), ends.tolist())]


def from_reply(reply, party, n_parties):
    """A party's sealed payloads of one tree's reply (a
    :class:`~..messages.TreeReply`) as ``{(to, field): bytes}``; every key
    at most once."""
    if "sealed" not in reply:
        return {}
    data = reply.take_all("sealed")
    to, lengths, field = (reply.take_all(k) for k in OUT_KEYS[1:])
    who = f"party {party + 1}"
    if not (to.shape == lengths.shape == field.shape and to.ndim == 1):
        raise ValueError(f"{who} sent sealed payloads with mismatched envelope fields")
    out = {}
    for p, f, blob in zip(to.tolist(), field.tolist(), cut(data, lengths, who, "payload")):
        if not (0 <= p < n_parties and p != party and 0 <= f < len(FIELDS)) or (p, FIELDS[f]) in out:
            raise ValueError(f"{who} addressed a sealed payload to party {p + 1} as field {f}")
        out[(p, FIELDS[f])] = blob
    return out


def from_message(msg, n_parties, me):
    """The sealed payloads of a message to this party (index ``me``): ``{from party: bytes}``."""
    if any(k not in msg for k in IN_KEYS):
        raise bad_message(f"{', '.join(map(repr, IN_KEYS))} travel together")
    src = int_array(msg["sealed_from"], "'sealed_from'")
    lengths = int_array(msg["sealed_len"], "'sealed_len'")
    if src.shape != lengths.shape:
        raise bad_message("'sealed_from' and 'sealed_len' differ in length")
    try:
        blobs = cut(msg["sealed"], lengths, "the master", "'sealed_len'")
    except ValueError as exc:
        raise bad_message(str(exc)) from None
    out = {}
    for p, blob in zip(src.tolist(), blobs):
        if not (0 <= p < n_parties and p != me) or p in out:
            raise bad_message(f"'sealed_from' names party index {p}: not another party, or twice")
        out[p] = blob
    return out


def check_bits(bits, n, what):
    """Packed partition bits: a bit per row of ``n``, the padding zero."""
    if not (isinstance(bits, np.ndarray) and bits.dtype == np.uint8 and bits.shape == ((n + 7) // 8,)):
        raise bad_message(f"{what} must be {(n + 7) // 8} uint8 bytes (a bit for each of {n} rows), got "
                          f"{shown(bits)}")
    if n % 8 and bits[-1] & (0xFF >> (n % 8)):
        raise bad_message(f"{what} holds bits beyond its rows")
    return bits


def n_left_of(bits, lengths):
    """The number of left rows of each node from its packed bits (nodes back to back)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    scratch = np.zeros_like(bits)
    return partitioner.place_bits(bits, lengths, np.cumsum(lengths) - lengths, scratch)


def open_decision(sp, sealer, lh, blob):
    """The label holder's sealed decision of this level for this party:
    ``split`` (open leaves, increasing), ``winner`` (a party per split), its
    own partition ``bits`` and, for this party's splits, ``feature``,
    ``bin`` and ``missing_left``."""
    t = sp.state
    dec = sealer.open(lh, DECISION, sp.tree_id, t["level"], blob)
    split = np.asarray(dec.get("split"))
    if not (isinstance(dec.get("split"), np.ndarray) and split.dtype.kind in "iu" and split.ndim == 1):
        raise bad_message("the label holder's decision holds no split nodes")
    winner = int_array(dec.get("winner"), "the decision's 'winner'")
    if winner.shape != split.shape or (winner.size and (winner.min() < 0 or winner.max() >= sealer.n_parties)):
        raise bad_message("the decision's 'winner' must name a party per split node")
    own = split[winner == lh]
    s, e = t["nodes"].bounds(own.astype(np.int32)) if own.size else (np.zeros(0, np.int64),) * 2
    dec["bits"] = check_bits(dec.get("bits"), int((e - s).sum()), "the label holder's bits")
    dec["split"], dec["winner"] = split.astype(np.int32), winner.astype(np.int32)
    return dec


def assemble_bits(sp, sealer, nodes, winners, trusted, blobs):
    """The level's packed partition bits (the split ``nodes`` back to back)
    from each winner's: ``trusted`` maps parties whose bits this party holds
    already (its own, the label holder's decision) to them; every other
    winner's come sealed in ``blobs`` (party -> bytes), bound to their nodes."""
    t = sp.state
    tree = t["nodes"]
    starts, ends = tree.bounds(nodes)
    lengths = (ends - starts).astype(np.int64)
    offsets = np.cumsum(lengths) - lengths
    packed = np.zeros((int(lengths.sum()) + 7) // 8, dtype=np.uint8)
    blobs = dict(blobs)
    for w in np.unique(winners).tolist():
        sel = winners == w
        n = int(lengths[sel].sum())
        if w in trusted:
            bits = trusted[w]
        else:
            if w not in blobs:
                raise bad_message(f"the partition bits of party {w + 1}'s splits are missing")
            pay = sealer.open(w, BITS, sp.tree_id, t["level"], blobs.pop(w))
            if not np.array_equal(np.asarray(pay.get("nodes")), nodes[sel]):
                raise bad_message(f"party {w + 1}'s sealed bits are for other nodes than the ones it won")
            bits = pay.get("bits")
        check_bits(bits, n, f"the partition bits of party {w + 1}")
        partitioner.place_bits(bits, lengths[sel], offsets[sel], packed)
    if blobs:
        raise bad_message(f"sealed bits from parties {sorted(p + 1 for p in blobs)}, which won no split here")
    return packed


def seal_bins(sealer, lh, splitter):
    """A passive party's reply to ``bins``: its features' bin counts and
    left-out (most frequent) bins, sealed for the label holder."""
    return {"sealed": sealer.seal(lh, BINS, *SETUP, {"n_bins": splitter.n_bins, "skip": splitter.skip})}


def open_bins(sealer, msg):
    """The label holder's ``bins`` message: every other party's sealed bin
    facts, opened and laid end to end in party order."""
    blobs = from_message(msg, sealer.n_parties, sealer.me)
    others = [p for p in range(sealer.n_parties) if p != sealer.me]
    if sorted(blobs) != others:
        raise bad_message("'bins' must carry one sealed payload from every other party")
    got = [sealer.open(p, BINS, *SETUP, blobs[p]) for p in others]
    out = {}
    for k in ("n_bins", "skip"):
        arrays = [np.empty(0, dtype=np.int64)]
        for p, g in zip(others, got):
            a = g.get(k)
            if not (isinstance(a, np.ndarray) and a.dtype.kind in "iu" and a.ndim == 1):
                raise bad_message(f"party {p + 1}'s sealed {k!r} are not integers")
            arrays.append(a.astype(np.int64))
        out[k] = np.concatenate(arrays)
    return out


def seal_leaf_sets(sealer, lh, packed, place):
    """A party's packed leaf sets (:func:`~fedforest.tree.predict.pack_leaf_sets`),
    sealed for the label holder, as a reply's envelope."""
    return outgoing([(lh, LEAF_SETS, sealer.seal(lh, LEAF_SETS, *place, packed))])


def leaves_from_sets(sealer, msg, own, trees, n_rows, place):
    """Every row's leaf (node id) in each of ``trees``, shape ``(len(trees),
    n_rows)``: the one-round prediction's intersection of every party's leaf
    sets, this party's own (``own``, packed) and the others' sealed for it in
    ``msg``'s envelope.  Only the label holder computes it."""
    from ...tree.predict import leaf_positions, leaves_of, unpack_leaf_sets
    blobs = from_message(msg, sealer.n_parties, sealer.me)
    others = [p for p in range(sealer.n_parties) if p != sealer.me]
    if sorted(blobs) != others:
        raise bad_message("the parties' leaf sets must come sealed from every other party")
    per_party = []
    for p in range(sealer.n_parties):
        packed = own if p == sealer.me else sealer.open(p, LEAF_SETS, *place, blobs[p])
        try:
            per_party.append(unpack_leaf_sets(packed, trees, n_rows))
        except (KeyError, ValueError, TypeError, IndexError) as exc:
            raise bad_message(f"party {p + 1}'s leaf sets do not fit the trees ({exc})") from None
    out = np.empty((len(trees), n_rows), dtype=np.int64)
    for i, tree in enumerate(trees):
        leaves = leaves_of(tree)
        out[i] = leaves[leaf_positions(n_rows, per_party, i, leaves.size)]
    return out
