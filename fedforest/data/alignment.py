"""ID alignment of vertical parties without revealing IDs to the master.

The parties agree on a secret the master cannot read (relayed by the master,
sealed for each party), send keyed hashes (AES-CMAC) of their IDs; the
master intersects them and sends each party the positions of the shared rows
in a common order.

IDs are matched exactly as written.  Each party counts its own IDs that
begin or end with whitespace (``'842302 '`` matches no ``'842302'``), prints
a few of them on its own output (:func:`warn_spaced_ids`) and tells the
master only their number, which the master's "no ID is shared" error names
per party: no ID leaves its party.
"""
import sys

import numpy as np

from cryptography.exceptions import InvalidTag

from ..crypto.ids import DIGEST_BYTES, hash_ids
from ..crypto.channel import PeerSeal
from ..crypto.keys import KEY_BYTES, KeyPair, pair_keys, random_secret, seal_to
from ..errors import ChannelError, InputError
from ..logs import status
from ..transport.base import ProtocolError, expect

MASTER = 0
GROUP_PUBLIC = "group_public"  # master -> party: send your public key for the group secret
GROUP_LEAD = "group_lead"      # master -> first party: seal a fresh secret for each other party
GROUP_MEMBER = "group_member"  # master -> other party: the lead's sealed secret for you
HASH_IDS = "hash_ids"          # master -> party: send keyed hashes of your IDs
ALIGN = "align"                # master -> party: the positions of the shared rows
SPACED_SHOWN = 3               # IDs with whitespace a party shows on its own output
SPACED_CHUNK = 1 << 20         # IDs checked for whitespace at a time (bounds the temporary texts)



def master_align(comm, cfg, n_rows_by_party):
    """Parties agree on a secret the master cannot read, send keyed hashes of
    their IDs; the master intersects and sends each party its aligned order."""
    parties = comm.clients
    pubs = {r: m["public"] for r, m in comm.exchange({r: {"op": GROUP_PUBLIC} for r in parties}).items()}
    first = parties[0]
    others = parties[1:]
    comm.send(first, {"op": GROUP_LEAD, "peers": others,
                      **{f"pub{r}": pubs[r] for r in others}})
    sealed = comm.recv(first)
    for r in others:
        comm.send(r, {"op": GROUP_MEMBER, "lead": first,
                      "sealed": sealed[f"sealed{r}"]})
    # every party hashes at once; the master then takes the hashes one party at a
    # time and matches each against the first party's as it comes, so that it holds
    # two parties' hashes at a time, not every party's
    comm.scatter({r: {"op": HASH_IDS} for r in parties})
    spaced = {}

    def receive(r):
        msg = comm.recv(r)
        keys = _digest_keys(msg.get("digests"), r)
        spaced[r] = _spaced_count(msg.get("n_spaced_ids"), keys.size, r)
        return keys
    keys = {r: (lambda r=r: receive(r)) for r in parties}
    positions = shared_positions(keys, first)
    del keys
    n_shared = positions[first].size
    if not n_shared:
        raise InputError("ID alignment", no_shared_id_message(spaced, n_rows_by_party))
    # with the positions, every party's public key: each pair of parties derives the keys of
    # the payloads it seals for the other (relayed by the master, opened only by the other)
    every = np.vstack([np.asarray(pubs[r], dtype=np.uint8).reshape(1, -1) for r in parties])
    comm.scatter({r: {"op": ALIGN, "positions": positions[r], "peer_keys": every} for r in parties})
    lost = {r: n_rows_by_party[r] - n_shared for r in parties}
    status(cfg, f"ID alignment: {n_shared} rows shared by all parties; rows dropped per party: "
         + ", ".join(f"party {r}: {lost[r]}" for r in parties)
         + "".join(f"; party {r}: {spaced[r]} IDs begin or end with whitespace" for r in parties if spaced[r]))
    return n_shared, lost


def no_shared_id_message(spaced, n_rows_by_party):
    """The master's error when no ID is shared, from each party's count of
    its IDs that begin or end with whitespace (``spaced``: rank -> count)."""
    text = "no ID is shared by all parties"
    with_space = [r for r in sorted(spaced) if spaced[r]]
    if with_space:
        each = "; ".join(f"party {r}: {spaced[r]} of its {n_rows_by_party.get(r, spaced[r])} IDs begin or "
                         "end with whitespace" for r in with_space)
        whose = ", ".join(f"party {r}" for r in with_space)
        return (f"{text}: {each} (the party's own output shows a few).  IDs are matched exactly as "
                f"written, so 'A17 ' and 'A17' differ: remove the whitespace from the ID column "
                f"of {whose}")
    return (f"{text} (no party's IDs begin or end with whitespace).  IDs are matched exactly as "
            "written, so '007' and '7', or 'A1' and 'a1', differ: check that every party's ID column "
            "(id_column) holds the same IDs written the same way")


def _spaced_count(n, n_ids, rank):
    """A party's count of its IDs with surrounding whitespace: an int in [0, n_ids]."""
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or not 0 <= n <= n_ids:
        raise _refuse(f"party {rank} sent 'n_spaced_ids' {str(n)[:40]!r}: it must be a count of its "
                      f"{n_ids} IDs")
    return int(n)


def spaced_ids(ids):
    """The row numbers of ``ids`` (:class:`~fedforest.crypto.ids.IdTexts`,
    or texts) that begin or end with whitespace (Unicode's), checked a
    chunk of :data:`SPACED_CHUNK` IDs at a time."""
    import pyarrow as pa
    import pyarrow.compute as pc
    texts = ids.to_arrow() if hasattr(ids, "to_arrow") else pa.array([str(v) for v in ids],
                                                                      type=pa.large_string())
    found = []
    for lo in range(0, len(texts), SPACED_CHUNK):
        part = texts.slice(lo, SPACED_CHUNK)
        hit = pc.not_equal(pc.utf8_trim_whitespace(part), part).to_numpy(zero_copy_only=False)
        found.append(np.flatnonzero(hit) + lo)
    return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)


def warn_spaced_ids(rank, ids, rows, stream=None):
    """A party's own line about its IDs that begin or end with whitespace
    (``rows``), with a few of them as Python writes them (the whitespace
    visible).  Printed here, on this party's output: the master is told only
    their number."""
    if not rows.size:
        return
    shown = rows[:SPACED_SHOWN]
    texts = ids.take(shown).to_numpy() if hasattr(ids, "take") else [str(ids[i]) for i in shown]
    more = ", ..." if rows.size > shown.size else ""
    print(f"party {rank}: warning: {rows.size} of its {len(ids)} IDs begin or end with whitespace, e.g. "
          f"{', '.join(repr(str(t)) for t in texts)}{more}; IDs are matched exactly as written (this "
          "line is this party's own: the master learns only the count)", file=stream or sys.stderr,
          flush=True)


def _digest_keys(digests, rank):
    """A party's ID hashes as one sortable 32-byte value per row; refused
    unless they are rows of :data:`DIGEST_BYTES` bytes, all distinct."""
    if not (isinstance(digests, np.ndarray) and digests.dtype == np.uint8 and digests.ndim == 2
            and digests.shape[1] == DIGEST_BYTES):
        raise _refuse(f"party {rank} sent 'digests' that are not rows of {DIGEST_BYTES} bytes")
    digests = np.ascontiguousarray(digests)
    if _repeats(digests):
        raise _refuse(f"party {rank} sent the same ID hash twice")
    return digests.view(np.dtype((np.void, DIGEST_BYTES))).ravel()


def _repeats(digests):
    """Whether a row of ``digests`` repeats: the rows' first 8 bytes sorted as
    integers and neighbours compared (8 bytes per row, no hash set); only where
    two prefixes are equal are the whole rows compared."""
    if digests.shape[0] < 2:
        return False
    prefix = np.sort(np.ascontiguousarray(digests[:, :8]).view("<u8").ravel())
    if not np.any(prefix[1:] == prefix[:-1]):
        return False
    del prefix
    keys = digests.view(np.dtype((np.void, DIGEST_BYTES))).ravel()
    return np.unique(keys).size != keys.size


def shared_positions(keys, first_rank):
    """The rows of every party (``keys``: rank -> distinct hashes, or a
    function that returns them when called) whose hash all parties hold, in
    the order of party ``first``'s rows: rank -> row numbers (int32 below
    2^31 rows, else int64), one common order.  Takes the other parties'
    hashes out of ``keys`` one at a time, in rank order, so that each is
    freed once matched (and, given as functions, received only then)."""
    def take(r):
        k = keys.pop(r)
        return k() if callable(k) else k

    first_keys = take(first_rank)
    n = first_keys.size
    index = np.int32 if n < 2 ** 31 else np.int64
    shared = np.ones(n, dtype=bool)
    # the first party's hashes as their sorted 8-byte prefixes (with each one's row)
    # and their last 8 bytes: 20 bytes per row held while the others are matched
    first = _sorted_prefixes(first_keys, index) + (_suffixes(first_keys),)
    del first_keys
    found = {}
    for r in sorted(keys):
        k = take(r)
        if not k.size:
            shared[:] = False
            found[r] = np.zeros(n, dtype=np.int32)
            continue
        at = _positions_by_prefix(k, first, shared)
        if at is None:
            at = _positions_by_whole_key(k, _whole_keys(*first), shared)
        del k
        found[r] = at
        del at
    del first
    rows = np.flatnonzero(shared).astype(index)
    return {r: rows if r == first_rank else found.pop(r)[rows] for r in sorted([first_rank, *found])}


MATCH_CHUNK = 1 << 16     # rows compared whole at a time (bounds the temporaries)


def _prefixes(keys):
    """The first 8 bytes of every hash as an unsigned integer (a sort key
    numpy sorts and searches as fast as any integer; whole 16-byte values
    compare byte by byte, 10x slower)."""
    raw = keys.view(np.uint8).reshape(keys.size, DIGEST_BYTES)
    return np.ascontiguousarray(raw[:, :8]).view("<u8").ravel()


def _suffixes(keys, rows=slice(None)):
    """The last 8 bytes of the hashes (of ``rows``) as unsigned integers."""
    raw = keys.view(np.uint8).reshape(keys.size, DIGEST_BYTES)
    return np.ascontiguousarray(raw[rows, 8:]).view("<u8").ravel()


def _whole_keys(prefix, rows, suffix):
    """The hashes again, in row order, from :func:`_sorted_prefixes` and
    :func:`_suffixes`."""
    raw = np.empty((suffix.size, DIGEST_BYTES), dtype=np.uint8)
    raw[rows, :8] = prefix.view(np.uint8).reshape(-1, 8)
    raw[:, 8:] = suffix.view(np.uint8).reshape(-1, 8)
    return raw.view(np.dtype((np.void, DIGEST_BYTES))).ravel()


def _sorted_prefixes(keys, index):
    """``keys``' prefixes in increasing order and the row of each (``index``)."""
    prefix = _prefixes(keys)
    order = np.argsort(prefix)
    prefix.sort()
    return prefix, order.astype(index)


def _positions_by_prefix(k, first, shared):
    """For every row of the first party, the row of ``k`` holding the same
    hash (int32 below 2^31 rows), ``shared`` cleared where none does.  Found
    by sorting ``k``'s 8-byte prefixes and searching them for the first
    party's, themselves in sorted order (``first``: their sorted prefixes,
    the row of each and their suffixes in row order; sorted needles keep the
    search in cache, 3x faster), then comparing the last 8 bytes where the
    prefixes agree; a chunk of rows at a time, so that the temporaries stay
    small.  None (nothing changed) where two of ``k``'s hashes share a
    prefix (about n^2 / 2^65 likely), which :func:`_positions_by_whole_key`
    then handles."""
    want, rows, tail = first
    prefix = _prefixes(k)
    by_key = np.argsort(prefix)
    prefix.sort()           # in place: no second copy (equal prefixes are handled below)
    if prefix.size > 1 and np.any(prefix[1:] == prefix[:-1]):
        return None
    by_key = by_key.astype(np.int32 if k.size < 2 ** 31 else np.int64)
    found = np.empty(rows.size, dtype=by_key.dtype)
    for lo in range(0, rows.size, MATCH_CHUNK):
        part = slice(lo, lo + MATCH_CHUNK)
        at = np.minimum(np.searchsorted(prefix, want[part]), prefix.size - 1)
        shared[rows[part]] &= prefix[at] == want[part]
        found[rows[part]] = by_key[at]
    del prefix, by_key
    for lo in range(0, found.size, MATCH_CHUNK):     # an equal prefix is not an equal hash
        part = slice(lo, lo + MATCH_CHUNK)
        shared[part] &= _suffixes(k, found[part]) == tail[part]
    return found


def _positions_by_whole_key(k, first_keys, shared):
    """:func:`_positions_by_prefix` by sorting and searching whole hashes."""
    by_key = np.argsort(k, kind="stable").astype(np.int32 if k.size < 2 ** 31 else np.int64)
    k_sorted = k[by_key]
    at = np.minimum(np.searchsorted(k_sorted, first_keys), k_sorted.size - 1)
    shared &= k_sorted[at] == first_keys
    del k_sorted
    return by_key[at]


def _group_info(lead, member):
    return b"fedforest/v1/group-secret/%d->%d" % (lead, member)


def _refuse(text):
    return ProtocolError(f"protocol error: {text}")


def _bytes_field(msg, key, size=None):
    """``msg[key]`` as bytes if it is a 1-D uint8 array (of ``size`` bytes when given)."""
    v = msg.get(key)
    if not (isinstance(v, np.ndarray) and v.dtype == np.uint8 and v.ndim == 1
            and (size is None or v.size == size)):
        raise _refuse(f"{key!r} must be a 1-D uint8 array" + (f" of {size} bytes" if size else ""))
    return v.tobytes()


def check_positions(positions, n_rows):
    """The master's aligned order of this party's rows: distinct row numbers
    in ``[0, n_rows)``, at least one; as int64."""
    if not (isinstance(positions, np.ndarray) and positions.dtype.kind in "iu" and positions.ndim == 1):
        raise _refuse("'positions' must be a 1-D array of row numbers")
    if not positions.size:
        raise _refuse("'positions' holds no row")
    if positions.min() < 0 or positions.max() >= n_rows:
        raise _refuse(f"'positions' holds row numbers outside [0, {n_rows})")
    seen = np.zeros(n_rows, dtype=bool)     # one byte per row: no sort, no hash set
    seen[positions] = True
    if np.count_nonzero(seen) != positions.size:
        raise _refuse("'positions' names a row twice")
    return positions.astype(np.int64)


def party_align(comm, rank, ids, n_parties=None):
    """A party's side: the positions of its shared rows in the common order
    (``n_parties``: the job's, which the lead's peers must be; None: not checked)."""
    kp = KeyPair()
    expect(comm.recv(MASTER), GROUP_PUBLIC)
    comm.send(MASTER, {"public": np.frombuffer(kp.public, dtype=np.uint8)})
    msg = comm.recv(MASTER)
    if msg.get("op") == GROUP_LEAD:
        # the lead draws the ID secret and seals it to each other party's key (HPKE):
        # the master relays the boxes but cannot open them
        peers = msg.get("peers")
        if not (isinstance(peers, list) and all(type(r) is int and r >= 1 and r != rank for r in peers)
                and len(set(peers)) == len(peers)):
            raise _refuse(f"'peers' must list other parties' ranks, got {str(peers)[:80]}")
        if n_parties is not None and sorted(peers) != [r for r in range(1, n_parties + 1) if r != rank]:
            raise _refuse(f"'peers' must list every other party of the {n_parties}, got {str(peers)[:80]}")
        secret = random_secret()
        out = {f"sealed{r}": np.frombuffer(seal_to(_bytes_field(msg, f"pub{r}", KEY_BYTES), secret,
                                                   _group_info(rank, r)), dtype=np.uint8)
               for r in peers}
        comm.send(MASTER, out)
    else:
        expect(msg, GROUP_MEMBER)
        lead = msg.get("lead")
        if type(lead) is not int or lead < 1 or lead == rank or (n_parties is not None and lead > n_parties):
            raise _refuse(f"'lead' must be another party's rank, got {str(lead)[:40]!r}")
        try:
            secret = kp.open_sealed(_bytes_field(msg, "sealed"), _group_info(lead, rank))
        except InvalidTag:
            raise ChannelError(lead, rank, "the ID secret sealed by the lead party failed "
                                           "authentication") from None
    expect(comm.recv(MASTER), HASH_IDS)
    spaced = spaced_ids(ids)
    warn_spaced_ids(rank, ids, spaced)
    comm.send(MASTER, {"digests": hash_ids(ids, secret), "n_spaced_ids": int(spaced.size)})
    msg = expect(comm.recv(MASTER), ALIGN)
    positions = check_positions(msg.get("positions"), len(ids))
    comm.peers = _peer_seals(kp, msg.get("peer_keys"), rank, n_parties)
    return positions


def _peer_seals(kp, keys, rank, n_parties):
    """The sealed payload channels with every other party (rank -> PeerSeal),
    from every party's public key (rank order); this party's own must be its own."""
    n = keys.shape[0] if isinstance(keys, np.ndarray) else -1
    if not (isinstance(keys, np.ndarray) and keys.dtype == np.uint8 and keys.ndim == 2
            and keys.shape[1] == KEY_BYTES and n >= rank and (n_parties is None or n == n_parties)):
        raise _refuse(f"'peer_keys' must hold a {KEY_BYTES}-byte public key per party, got "
                      f"{getattr(keys, 'shape', type(keys).__name__)}")
    if bytes(keys[rank - 1]) != kp.public:
        raise _refuse("'peer_keys' gives this party another public key than its own")
    seals = {}
    for r in range(1, n + 1):
        if r != rank:
            send, recv = pair_keys(kp, bytes(keys[r - 1]), rank, r, b"peer")
            seals[r] = PeerSeal(rank, r, send, recv)
    return seals
