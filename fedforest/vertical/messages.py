"""The vertical growth protocol's message formats and checks: a batch message
carries the messages of several trees (``"<tree>.<key>"`` entries, see
:func:`pack_batch`), a party's reply the trees' arrays back to back
(:func:`join_replies`, :class:`BatchReply`); a party checks every received
value it can (:func:`int_value`, :func:`node_list`, :func:`check_fields`,
:func:`accept_settings`) before a kernel sees it."""
import abc
import numbers
import re

import numpy as np

from ..transport.base import ProtocolError
from ..tree.growth import SplitSettings


GROW = "grow"        # master -> party: the find/partition messages of several trees


COMMIT = "commit"    # master -> party: last partitions of a batch; store its trees


FUSED = "commit_grow"  # master -> party: the previous batch's commit, then this batch's first grow


APPLY = "apply"      # master -> party: the last level's partitions of several trees; no reply


class Parties(abc.ABC):
    """The parties as the master's grower sees them
    (:class:`~fedforest.vertical.common.RemoteParties` over a transport,
    :class:`~fedforest.vertical.party_splitter.LocalParties` in this process)."""

    #: whether a batch's trees may each run all their rounds on their own (an
    #: exchange costs no round trip), instead of every level in lock step
    trees_apart = False

    @abc.abstractmethod
    def exchange(self, msgs):
        """One round: ``msgs[p]`` to party index ``p`` (None: no message);
        returns the replies in party order (None where no message went)."""

    @abc.abstractmethod
    def post(self, msgs):
        """One-way messages (None: none for that party); no reply comes."""


class Posted:
    """What a tree's growth steps yield for a one-way message (per party, or
    None): the grower sends it on and goes on without waiting for a reply."""

    def __init__(self, msgs):
        self.msgs = msgs


def pack_batch(op, items):
    """One message holding the sub-messages ``items`` (``(tree, dict)`` pairs)
    as flat ``"<tree>.<key>"`` entries, plus the tree numbers."""
    msg = {"op": op, "trees": np.array([t for t, _ in items], dtype=np.int64)}
    for t, sub in items:
        for k, v in sub.items():
            msg[f"{t}.{k}"] = v
    return msg


def split_fused(replies, grow):
    """The replies to a :data:`FUSED` exchange: (the commit replies, the grow
    replies); a party that got no grow part answered the commit alone."""
    commits, grows = [], []
    for p, (reply, g) in enumerate(zip(replies, grow)):
        if g is None:
            commits.append(reply)
            grows.append(None)
            continue
        if not (isinstance(reply, dict) and isinstance(reply.get("commit"), dict)
                and isinstance(reply.get("grow"), dict)):
            raise ProtocolError(f"protocol error: party {p + 1} answered a commit and grow message "
                                "without its 'commit' and 'grow' parts")
        commits.append(reply["commit"])
        grows.append(reply["grow"])
    return commits, grows


def join_replies(replies):
    """One party's replies to the trees of a batch (in tree order) as one
    message: per key, the trees' arrays back to back along the first axis,
    and under ``"len.<key>"`` each tree's number of entries (0 when a tree's
    reply lacks the key)."""
    keys = []
    for reply in replies:
        keys += [k for k in reply if k not in keys]
    out = {}
    for k in keys:
        arrays = [np.asarray(r[k]) for r in replies if k in r]
        out[k] = np.concatenate(arrays)
        out["len." + k] = np.array([np.shape(r[k])[0] if k in r else 0 for r in replies], dtype=np.int64)
    return out


class TreeReply:
    """One tree's part of a party's batch reply: ``take(key, n)`` returns the
    tree's ``n`` entries of ``key`` and checks that the party sent exactly that many."""

    def __init__(self, parts, party):
        self.parts = parts
        self.party = party
        self.taken = set()

    def __contains__(self, key):
        return key in self.parts

    def take(self, key, n):
        arr = self.parts.get(key, np.empty(0))
        got = arr.shape[0]
        if got != n or key in self.taken:
            raise ValueError(f"party {self.party + 1} sent {got} {key!r} entries for a tree that "
                             f"expects {n}")
        self.taken.add(key)
        return arr

    def take_upto(self, key, n):
        """The tree's entries of ``key``, however many (at most ``n``)."""
        arr = self.parts.get(key, np.empty(0))
        if arr.shape[0] > n or key in self.taken:
            raise ValueError(f"party {self.party + 1} sent {arr.shape[0]} {key!r} entries for a tree "
                             f"that expects at most {n}")
        self.taken.add(key)
        return arr

    def take_all(self, key):
        """The tree's entries of ``key``, however many (sealed bytes)."""
        arr = self.parts.get(key, np.empty(0))
        if key in self.taken:
            raise ValueError(f"party {self.party + 1} sent {key!r} twice for one tree")
        self.taken.add(key)
        return arr

    def check_used(self):
        for key, arr in self.parts.items():
            if key not in self.taken and arr.shape[0]:
                raise ValueError(f"party {self.party + 1} sent {key!r} entries no tree asked for")


class BatchReply:
    """A party's :func:`join_replies` message cut into the parts of the
    batch's trees (``trees``: the trees the party was asked about, in order)."""

    def __init__(self, msg, party, trees):
        self.party = party
        n = len(trees)
        cuts = {}
        for key, arr in msg.items():
            if key in ("op", "trees", "n_trees") or key.startswith("len."):
                continue
            if np.ndim(arr) < 1:
                raise ValueError(f"party {party + 1} sent {key!r} that is not an array of entries")
            lengths = np.asarray(msg.get("len." + key, ()), dtype=np.int64)
            if lengths.shape != (n,) or np.any(lengths < 0) or lengths.sum() != np.shape(arr)[0]:
                raise ValueError(f"party {party + 1} sent {key!r} entries that do not match the "
                                 f"batch's {n} trees")
            cuts[key] = (arr, np.concatenate(([0], np.cumsum(lengths))))
        self.tree_parts = {t: TreeReply({k: a[c[i]:c[i + 1]] for k, (a, c) in cuts.items()}, party)
                           for i, t in enumerate(trees)}

    def part(self, tree):
        return self.tree_parts[tree]

    def check_used(self):
        for part in self.tree_parts.values():
            part.check_used()


def unpack_batch(msg):
    """Inverse of :func:`pack_batch` (without ``op``): ``{tree: sub-message}``;
    ProtocolError for tree numbers that are not distinct and increasing, or
    a key that names no tree of the message."""
    trees = int_array(msg.get("trees"), "'trees'")
    if trees.size and (trees.min() < 0 or np.any(trees[1:] <= trees[:-1])):
        raise bad_message("'trees' must list distinct tree numbers in increasing order")
    out = {int(t): {} for t in trees}
    for key, v in msg.items():
        if key in ("op", "trees"):
            continue
        m = _TREE_KEY.fullmatch(key) if isinstance(key, str) else None
        if m is None or int(m.group(1)) not in out:
            raise bad_message(f"key {str(key)[:60]!r} names no tree of the message")
        out[int(m.group(1))][m.group(2)] = v
    return out


# -- checks of received messages (a party trusts no value it cannot check) ----
_TREE_KEY = re.compile(r"(0|[1-9][0-9]{0,8})\.([a-z_]{1,40})")


COUNT_DTYPES = (np.dtype(np.uint8), np.dtype(np.int32))   # bootstrap counts as the grower sends them


MASK_DTYPES = (np.dtype(np.uint8), np.dtype(np.bool_))


def bad_message(text):
    """The error of a message the protocol does not allow at this point."""
    return ProtocolError(f"protocol error: {text}")


def shown(value):
    """A short description of a received value, for error messages."""
    if isinstance(value, np.ndarray):
        return f"a {value.dtype} array of shape {value.shape}"
    return f"{type(value).__name__} {str(value)[:40]!r}"


def int_value(value, name, lo, hi):
    """``value`` as an int if it is an integer in ``[lo, hi]``, else ProtocolError naming ``name``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) \
            or not lo <= value <= hi:
        raise bad_message(f"{name} must be an integer in [{lo}, {hi}], got {shown(value)}")
    return int(value)


def int_array(value, name, ndim=1):
    """``value`` if it is an integer array of ``ndim`` dimensions, else ProtocolError naming ``name``."""
    if not (isinstance(value, np.ndarray) and value.dtype.kind in "iu" and value.ndim == ndim):
        raise bad_message(f"{name} must be a {ndim}-D array of integers, got {shown(value)}")
    return value


def index_array(value, name, n):
    """A 1-D integer array whose values all lie in ``[0, n)``, as int64."""
    a = int_array(value, name)
    if a.size and (a.min() < 0 or a.max() >= n):
        raise bad_message(f"{name} holds values outside [0, {n})")
    return np.asarray(a, dtype=np.int64)


def sorted_subset(a, b):
    """Whether every value of ``a`` is in ``b`` (both sorted; far cheaper than
    ``np.isin`` on the small arrays of one level)."""
    if not a.size:
        return True
    at = np.searchsorted(b, a)
    return at[-1] < b.size and bool((b[at] == a).all())


def node_list(value, name, allowed):
    """Node ids drawn from ``allowed`` (a sorted array of distinct ids, or a
    ``range``), distinct and increasing, as int32."""
    a = int_array(value, name)
    if a.size:
        if (a[1:] <= a[:-1]).any():
            raise bad_message(f"{name} must list distinct nodes in increasing order")
        inside = (allowed.start <= a[0] and a[-1] < allowed.stop) if isinstance(allowed, range) \
            else sorted_subset(a, allowed)
        if not inside:
            raise bad_message(f"{name} names nodes that are not open leaves of the tree")
    return np.asarray(a, dtype=np.int32)


def check_fields(values, expected, what, skip=()):
    """ProtocolError naming the first field of the received table ``values``
    that differs from this party's own ``expected`` (same fields, same types,
    equal values; fields in ``skip`` are checked by the caller)."""
    if not isinstance(values, dict):
        raise bad_message(f"{what} must be a table, got {shown(values)}")
    if set(values) != set(expected):
        raise bad_message(f"{what} has the fields {sorted(map(str, values))}, expected {sorted(expected)}")
    for k, v in expected.items():
        got = values[k]
        if k not in skip and not (type(got) is type(v) and got == v):
            raise bad_message(f"{what} field {k!r} is {shown(got)}; this party's own settings give {v!r}")


def accept_settings(values, params, n_rows, is_classification, n_classes, n_features, reveal_splits):
    """A party's split settings: its own, built from ``params`` and what it knows
    (``n_features``: its own columns; ``reveal_splits``: its own consent),
    once the master's ``values`` are found equal (ProtocolError naming the
    first field that differs).  Only ``hist_cache_rows`` depends on the
    other parties' columns: the master's value is taken when it is at least
    the bound this party's columns give (a larger one keeps fewer histograms)."""
    at_least = max(int(n_features), 1)
    if isinstance(params.max_features, numbers.Integral):
        at_least = max(at_least, int(params.max_features))   # the master has that many
    own = SplitSettings(params, n_rows, is_classification, n_classes, at_least)
    own.reveal_splits = bool(reveal_splits)
    check_fields(values, own.to_dict(), "'settings'", skip=("hist_cache_rows",))
    got = values["hist_cache_rows"]
    if isinstance(got, bool) or not isinstance(got, int) or not got >= own.hist_cache_rows:
        raise bad_message(f"'settings' field 'hist_cache_rows' is {shown(got)}; this party's "
                          f"columns need at least {own.hist_cache_rows}")
    # a node never holds more rows than there are: larger values all keep nothing
    own.hist_cache_rows = min(got, int(n_rows) + 1)
    return own
