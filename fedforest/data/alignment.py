"""ID alignment of vertical parties without revealing IDs to the master.

The parties agree on a secret the master cannot read (relayed by the master,
sealed for each party), send keyed hashes (HMAC-SHA256) of their IDs; the
master intersects them and sends each party the positions of the shared rows
in a common order.
"""
import numpy as np

from cryptography.exceptions import InvalidTag

from ..crypto.ids import hash_ids
from ..crypto.keys import KEY_BYTES, KeyPair, random_secret, seal_to
from ..errors import ChannelError, InputError
from ..logs import status
from ..transport.base import ProtocolError, expect

MASTER = 0
GROUP_PUBLIC = "group_public"  # master -> party: send your public key for the group secret
GROUP_LEAD = "group_lead"      # master -> first party: seal a fresh secret for each other party
GROUP_MEMBER = "group_member"  # master -> other party: the lead's sealed secret for you
HASH_IDS = "hash_ids"          # master -> party: send keyed hashes of your IDs
ALIGN = "align"                # master -> party: the positions of the shared rows



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
    digests = {r: m["digests"] for r, m in comm.exchange({r: {"op": HASH_IDS} for r in parties}).items()}
    index = {}
    for r in parties:
        keys = [d.tobytes() for d in digests[r]]
        index[r] = dict(zip(keys, range(len(keys))))
    order = [k for k in (d.tobytes() for d in digests[first]) if all(k in index[r] for r in others)]
    if not order:
        raise InputError("ID alignment", "no ID is shared by all parties")
    positions = {r: np.fromiter((index[r][k] for k in order), dtype=np.int64, count=len(order))
                 for r in parties}
    comm.scatter({r: {"op": ALIGN, "positions": positions[r]} for r in parties})
    lost = {r: n_rows_by_party[r] - len(order) for r in parties}
    status(cfg, f"ID alignment: {len(order)} rows shared by all parties; rows dropped per party: "
         + ", ".join(f"party {r}: {lost[r]}" for r in parties))
    return len(order), lost


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
    if np.unique(positions).size != positions.size:
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
    comm.send(MASTER, {"digests": hash_ids(ids, secret)})
    return check_positions(expect(comm.recv(MASTER), ALIGN).get("positions"), len(ids))
