"""The label holder of the encrypted modes: it holds the Paillier key pair and
chooses every split (SecureBoost's active party).

Per level of a tree it receives one message from the master (after the
level's partition, posted): ``decide``, with its own candidate nodes and
feature masks (``cand``, ``fmask``: it scores its own columns in plaintext,
with the plain mode's kernels), the other parties' encrypted per-bin sums
for the (node, feature) pairs of the level's plan (``pair_*``), the pairs to
derive as parent minus smaller sibling (``derive_*``) and the other parties'
feature masks (``pmask``).  It decrypts, rebuilds each histogram (the
  left-out most frequent bin from the node's total, which it knows from its
  own labels), checks every bin against the plaintext row counts and the
  slot bounds, evaluates the candidates with the plain mode's kernel
  arithmetic and takes the largest gain per node (the lowest party on
  ties).  It answers with the nodes that split, the winning party of each,
  the chosen feature and bin of the other parties' splits and the partition
  bits of its own splits: no gain, no statistic, no leaf value.

Node statistics, impurities, leaf values and the importance shares stay
here and are stored with the label holder's trees.  With the same seed the
trees are the plain mode's, bit for bit: every statistic is an exact integer
sum on the plain mode's grid.
"""
import threading
import time

import gmpy2
import numpy as np

from ...crypto import paillier as P
from ...errors import InputError
from ...tree import criterion, splitter
from ...tree.binning import MISSING_BIN
from ...tree.growth import PARTY_COLUMNS, gain_scale, min_leaf_weight
from ..messages import bad_message, int_array, node_list, shown
from ..party_splitter import OwnSplits
from ...tree.importance import node_shares
from . import sealed as S
from ..encrypted_labels import N_SLOTS_BIN, SPARE_BITS, ProtocolIntegrityError, gil_free, hist_layout

def half_decrypter(private_key):
    """``(decrypt, bits)``: the decryption modulo the key's smaller prime ``p``
    alone (``L(c^(p-1) mod p^2) h_p mod p``, one of the two halves of the
    CRT decryption), exact for plaintexts below ``p``: ``bits = bits(p) - 1 -
    SPARE_BITS`` bits of sums leave its highest bits free, as a full
    plaintext's (a ciphertext altered or made under another key shows bits
    there but for a chance of 2**-64); ``(None, 0)`` when the key does not
    show its primes."""
    k = getattr(private_key, "_key", None)
    parts = [getattr(k, a, None) for a in ("p", "psquare", "hp")]
    if any(x is None for x in parts):
        return None, 0
    p, psq, hp = (gmpy2.mpz(x) for x in parts)
    pm1 = p - 1

    def decrypt(c):
        return (gmpy2.powmod(c, pm1, psq) - 1) // p * hp % p

    return decrypt, int(p.bit_length()) - 1 - SPARE_BITS


_COUNTS = threading.Lock()   # the label holders' decryption counts and seconds


DECIDE = "decide"   # master -> label holder: the other parties' sums of a level; reply: the splits
PAIR_KEYS = ("pair_party", "pair_node", "pair_feat")
DERIVE_KEYS = ("derive_party", "derive_node", "derive_feat")
DECIDE_KEYS = ("cand", "fmask", "pmask") + PAIR_KEYS + DERIVE_KEYS + S.IN_KEYS


def holder_columns(n_stats):
    """The label holder's per-node columns besides a party's own."""
    return dict(PARTY_COLUMNS, ints=(np.int64, 0, n_stats), stats=(np.float64, 0.0, n_stats),
                weight=(np.float64, 0.0), impurity=(np.float64, 0.0), has_stats=(np.uint8, 0),
                owner=(np.int32, -1), split_bin=(np.int32, -1), split_feature=(np.int32, -1))


class KeyHolder(OwnSplits):
    """The label channel of the label holder: split search on its own
    columns, and the decision of every split from its own gains and the
    other parties' decrypted sums.

    ``kind`` is the tree kind (:class:`~fedforest.tree.growth.ForestTrees` or
    :class:`~fedforest.vertical.boost.boosting.BoostTrees`); ``spec`` the slot
    layout; ``private_key`` its own key; ``me`` its party index;
    ``feature_counts`` every party's column count (party order).  The
    splitter's labels are :class:`HeldLabels` or :class:`GradientRounds`."""

    # the trees of a large batch (a forest's) are decided on parallel threads, a small batch's
    # decryptions use the party's threads (P.parallel_map); a subclass that keeps state across
    # the trees of a batch says for itself whether its trees may run on threads
    tree_threads = property(lambda self: type(self) is KeyHolder)
    child_stats = False    # nothing label-derived goes to the master
    extra_ops = frozenset((DECIDE,))
    op_keys = dict(OwnSplits.op_keys, decide=DECIDE_KEYS)
    apply_keys = ("split_nodes", "winners") + S.IN_KEYS
    # label_holder_first_trees: the trees below it split on its own columns, and no other party
    # takes part in them (no sums come, no decision goes out)
    solo_trees = 0
    # the privacy audit (:class:`~..audit.LabelAudit`), fed every finished tree the other parties saw
    audit = None

    def __init__(self, kind, spec, private_key, me, feature_counts, sealer):
        self.sealer = sealer
        self.kind = kind
        self.spec = spec
        self.key = private_key
        self.me = int(me)
        self.feature_counts = [int(c) for c in feature_counts]
        self.party_bins = {}       # party -> (n_bins, skip) of its features
        self.decrypted = 0
        self.decrypt_seconds = 0.0

    def others(self, sp):
        """The parties that take part in the tree being grown, this one aside."""
        if sp.tree_id is not None and sp.tree_id < self.solo_trees:
            return []
        return [p for p in range(len(self.feature_counts)) if p != self.me]

    def attach(self, sp):
        if self.feature_counts[self.me] != sp.n_features:
            raise bad_message(f"'feature_counts' gives the label holder {self.feature_counts[self.me]} columns; "
                              f"it has {sp.n_features}")
        sp.labels.bind(sp)

    # -- set-up -----------------------------------------------------------
    def set_bins(self, msg):
        """The other parties' bin counts and most frequent bins, relayed by the
        master (concatenated in party order)."""
        n_bins, skip = msg.get("n_bins"), msg.get("skip")
        others = [p for p in range(len(self.feature_counts)) if p != self.me]
        total = sum(self.feature_counts[p] for p in others)
        for name, a in (("n_bins", n_bins), ("skip", skip)):
            if not (isinstance(a, np.ndarray) and a.dtype.kind in "iu" and a.shape == (total,)):
                raise bad_message(f"{name!r} must hold {total} integers (one per column of the other "
                                  f"parties), got {shown(a)}")
        if total and (n_bins.min() < 1 or n_bins.max() > MISSING_BIN or skip.min() < 0
                      or skip.max() > MISSING_BIN):
            raise bad_message(f"'n_bins' and 'skip' must lie in [1, {MISSING_BIN}] and [0, {MISSING_BIN}]")
        at = 0
        for p in others:
            k = self.feature_counts[p]
            self.party_bins[p] = (n_bins[at:at + k].astype(np.int64), skip[at:at + k].astype(np.int64))
            at += k

    # -- the tree's state ---------------------------------------------------
    def node_columns(self):
        """The per-node columns of its trees."""
        return holder_columns(self.spec.n_stats)

    def begin(self, sp, msg):
        t = sp.plain_tree(msg, self.node_columns())
        t["counts"] = np.asarray(msg["counts"])
        t["store"] = {}       # (party, node, feature) -> (sums, row counts) of the last decided level
        t["decided"] = None   # the split nodes of this level's decision, until applied
        t["decided_winner"] = t["own_bits"] = None   # their winners and its own splits' bits
        t["own_gain"] = None
        t.update(sp.labels.tree_begin(msg))
        return t

    def ensure_stats(self, sp, nodes, t=None):
        """Statistics, weight and impurity of the nodes that have none yet."""
        t = sp.state if t is None else t
        tree = t["nodes"]
        c = tree.col
        todo = nodes[c["has_stats"][nodes] == 0]
        if not todo.size:
            return
        ints = sp.labels.node_ints(t, tree.rows, *tree.bounds(todo))
        stats = sp.labels.to_float(t, ints)
        s = sp.settings
        w, imp = criterion.stats_weight_impurity(stats, s.is_classification, s.crit, s.reg_lambda)
        c["ints"][todo] = ints
        c["stats"][todo] = stats
        c["weight"][todo] = w
        c["impurity"][todo] = imp
        c["has_stats"][todo] = 1

    # -- messages -----------------------------------------------------------
    def handle_op(self, sp, msg):
        t0 = time.perf_counter()
        try:
            return self._decide_checked(sp, msg)
        finally:
            sp.timed("decision", time.perf_counter() - t0)
            sp.seconds["decryption"] = self.decrypt_seconds

    def find(self, sp, msg):
        """Score its own columns; the gains stay here for the decision."""
        t = sp.state
        nodes = msg["nodes"]
        gain = sp.score(msg)["gain"] if nodes.size else np.empty(0)
        t["own_gain"] = (nodes, np.asarray(gain, dtype=np.float64))
        return {}

    def check_apply(self, sp, msg):
        """A level's partition must be exactly the one decided here."""
        decided = sp.state["decided"]
        nodes = msg.get("split_nodes")
        if decided is None or not (isinstance(nodes, np.ndarray) and np.array_equal(nodes, decided)):
            raise bad_message("'split_nodes' must be the splits the label holder decided at this level")

    def level_bits(self, sp, msg, nodes):
        """The level's partition bits: its own, and the other winners' sealed
        for it; the master's plain ``winners`` must be the ones decided here."""
        t = sp.state
        winners = int_array(msg.get("winners"), "'winners'")
        if t["decided_winner"] is None or not np.array_equal(winners, t["decided_winner"]):
            raise bad_message("'winners' must be the winners the label holder decided at this level")
        blobs = S.from_message(msg, self.sealer.n_parties, self.me)
        bits = S.assemble_bits(sp, self.sealer, nodes, winners, {self.me: t["own_bits"]}, blobs)
        t["decided_winner"] = t["own_bits"] = None
        return bits

    def applied(self, sp, nodes):
        tree = sp.state["nodes"]
        sp.state["decided"] = None
        children = np.arange(tree.n - 2 * nodes.size, tree.n, dtype=np.int32)
        self.ensure_stats(sp, children)

    def node_values(self, sp, stats, weight):
        """Node values from node statistics (boosting: scaled by the learning rate)."""
        return self.kind.leaf_values(stats, weight) * sp.labels.value_scale

    def check_finish(self, sp, msg):
        if sp.state["decided"] is not None:
            raise bad_message("'finish' before the decided splits were applied")

    def finish(self, sp):
        """What only the label holder stores with a tree: node statistics,
        impurities, leaf values and every split's share of the tree's
        impurity decrease (in place of the master's)."""
        t = sp.state
        tree = t["nodes"]
        self.ensure_stats(sp, np.arange(tree.n, dtype=np.int32))
        c = tree.trimmed(["left", "right", "stats", "weight", "impurity", "owner", "split_feature",
                          "split_bin", "start", "end"])
        if self.audit is not None and self.others(sp):
            # a tree the other parties saw: its leaves' rows, as every one of them knows them
            self.audit.add_tree(tree.rows, c["start"], c["end"], c["left"], c["right"])
        value = self.node_values(sp, c["stats"], c["weight"])
        full = {"children_left": c["left"], "children_right": c["right"], "weighted_n_node_samples": c["weight"],
                "impurity": c["impurity"]}
        t["importance"] = node_shares(full)
        return dict(value=value, impurity=c["impurity"], weighted_n_node_samples=c["weight"],
                    n_node_samples=(c["end"] - c["start"]).astype(np.int64), owner=c["owner"],
                    split_feature=c["split_feature"], split_bin=c["split_bin"])

    def committed(self, sp):
        sp.labels.committed(sp.tree_ids, sp.trees)

    # -- the decision ---------------------------------------------------------
    def _open_sums(self, sp, msg):
        """The other parties' sealed sums, row counts and weights of this
        level, opened and laid end to end in party order (``hist``, ``cnt``,
        ``wcnt``)."""
        t = sp.state
        others = self.others(sp)
        blobs = S.from_message(msg, len(self.feature_counts), self.me)
        if sorted(blobs) != others:
            raise bad_message("a 'decide' must carry one sealed sums payload from every other party")
        width = self.key.public.ciphertext_bytes
        parts = {"hist": [np.zeros((0, width), dtype=np.uint8)], "cnt": [np.empty(0, np.uint32)],
                 "wcnt": [np.empty(0, np.uint32)]}
        for p in others:
            got = self.sealer.open(p, S.SUMS, sp.tree_id, t["level"], blobs[p])
            for k in parts:
                a = got.get(k)
                if not (isinstance(a, np.ndarray) and (a.dtype == np.uint8 if k == "hist" else a.dtype.kind in "iu")):
                    raise bad_message(f"party {p + 1}'s sealed sums hold {shown(a)} as {k!r}")
                if k == "hist":
                    if a.size == 0:
                        a = a.reshape(0, width)
                    if a.ndim != 2 or a.shape[1] != width:
                        raise bad_message(f"party {p + 1}'s sealed sums are not ciphertexts of this key")
                parts[k].append(a)
        return dict(msg, hist=np.vstack(parts["hist"]), cnt=np.concatenate(parts["cnt"]),
                    wcnt=np.concatenate(parts["wcnt"]))

    def _decide_checked(self, sp, msg):
        t = sp.state
        msg = self._open_sums(sp, msg)
        if sp.checked:     # its keys were checked with every message's
            if t["decided"] is not None:
                raise bad_message("a second 'decide' for one level of the tree")
            cand = node_list(msg.get("cand"), "'cand'", t["open_ids"])
            # its own candidates and masks first: it scores its own columns
            self.find(sp, sp.check_find({"nodes": cand, "fmask": msg.get("fmask")}))
            pmask = msg.get("pmask")
            width = sum(self.feature_counts) - sp.n_features
            if not (isinstance(pmask, np.ndarray) and pmask.dtype in (np.dtype(np.uint8), np.dtype(np.bool_))
                    and pmask.shape == (cand.size, width)):
                raise bad_message(f"'pmask' must be a uint8 array of shape ({cand.size}, {width}), "
                                  f"got {shown(pmask)}")
            if not self.others(sp) and pmask.any():
                raise bad_message(f"'pmask' names other parties' columns in tree {sp.tree_id}, one of the "
                                  f"first {self.solo_trees} trees (label_holder_first_trees), which split "
                                  "on the label holder's columns alone")
            for k in ("hist", "cnt", "wcnt") + PAIR_KEYS + DERIVE_KEYS:
                if k != "hist":
                    int_array(msg.get(k), repr(k))
            hist = msg.get("hist")
            if not (isinstance(hist, np.ndarray) and hist.dtype == np.uint8 and hist.ndim == 2):
                raise bad_message(f"'hist' must be blocks of ciphertext bytes, got {shown(hist)}")
        else:
            self.find(sp, {"nodes": msg["cand"], "fmask": msg["fmask"]})
        try:
            return self._decide(sp, msg)
        except (KeyError, IndexError, ValueError) as exc:
            raise bad_message(f"the 'decide' message does not match this level's requests ({exc})") from None

    def _pairs(self, msg, keys):
        party, node, feat = (np.asarray(msg[k], dtype=np.int64) for k in keys)
        if not party.shape == node.shape == feat.shape:
            raise bad_message(f"{', '.join(map(repr, keys))} differ in length")
        return party, node, feat

    def _decide(self, sp, msg):
        t = sp.state
        tree = t["nodes"]
        c = tree.col
        n_parties = len(self.feature_counts)
        cand = np.asarray(msg["cand"], dtype=np.int32)
        self.ensure_stats(sp, cand)
        own_nodes, own_gain = t["own_gain"]
        keep = self.kind.searchable(c["impurity"][cand])
        nodes = cand[keep]
        gains = np.full((n_parties, nodes.size), -np.inf)
        if own_gain.size:
            gains[self.me] = own_gain[keep]
        # the other parties' histograms of this level: decrypted, then derived
        pp, pn, pf = self._pairs(msg, PAIR_KEYS)
        dp, dn, df = self._pairs(msg, DERIVE_KEYS)
        if sp.checked:
            open_ids = t["open_ids"]
            for arr, what in ((pn, "'pair_node'"), (dn, "'derive_node'")):
                if arr.size and (arr.min() < open_ids.start or arr.max() >= open_ids.stop):
                    raise bad_message(f"{what} names nodes that are not open leaves of the tree")
        self.ensure_stats(sp, np.unique(pn).astype(np.int32))
        cnt_all = np.asarray(msg["cnt"], dtype=np.int64)
        wcnt_all = np.asarray(msg["wcnt"], dtype=np.int64)
        blocks = msg["hist"]
        store = {}
        at_cnt = at_ct = 0
        others = self.others(sp)
        if pp.size and not np.isin(pp, others).all() or dp.size and not np.isin(dp, others).all():
            raise bad_message("pairs name a party that does not receive ciphertexts")
        for p in others:
            sel = pp == p
            feats, pnodes = pf[sel], pn[sel]
            if feats.size and (feats.min() < 0 or feats.max() >= self.feature_counts[p]):
                raise bad_message(f"pairs name features outside party {p + 1}'s columns")
            n_bins = self.party_bins[p][0]
            n_cnt = int((n_bins[feats] + 1).sum()) if feats.size else 0
            seg, layout, n_values = hist_layout(feats, n_bins, cnt_all[at_cnt:at_cnt + n_cnt])
            wcnt = wcnt_all[at_cnt:at_cnt + n_cnt]
            if wcnt.shape[0] != n_cnt:
                raise bad_message("'wcnt' is shorter than the pairs need")
            at_cnt += n_cnt
            # every bin's weight, then the widths of the sent sums (the party's own arithmetic)
            wbs = []
            for i, f in enumerate(feats.tolist()):
                wb = np.zeros(N_SLOTS_BIN, dtype=np.int64)
                nb = int(n_bins[f])
                wb[:nb], wb[MISSING_BIN] = wcnt[seg[i]:seg[i] + nb], wcnt[seg[i] + nb]
                wbs.append(wb)
            weights = np.concatenate([wb[inc] for wb, (_, inc, _) in zip(wbs, layout)]) if wbs \
                else np.empty(0, np.int64)
            values, n_ct = self._decrypt_sums(sp, blocks, at_ct, weights, f"sums of party {p + 1}")
            at_ct += n_ct
            pos = 0
            for i, j in enumerate(pnodes.tolist()):
                cnt, inc, left_out = layout[i]
                h = np.zeros((N_SLOTS_BIN, self.spec.n_stats), dtype=np.int64)
                h[inc] = values[pos:pos + inc.size]
                pos += inc.size
                if left_out >= 0:   # the left-out bin: node total minus the rest
                    h[left_out] = c["ints"][j] - h.sum(axis=0)
                elif c["ints"][j].any():
                    raise ProtocolIntegrityError(f"party {p + 1} counts no rows in node {j}, which has some")
                self._check_hist(h, wbs[i], p)
                store[(p, j, int(feats[i]))] = (h, cnt)
        if at_cnt != cnt_all.shape[0] or at_cnt != wcnt_all.shape[0] or at_ct != blocks.shape[0]:
            raise bad_message("the 'decide' message holds more sums or counts than its pairs need")
        family = t["family"]
        for p, j, f in zip(dp.tolist(), dn.tolist(), df.tolist()):
            if family is None:
                raise bad_message("'derive' pairs at the root")
            split_nodes, first = family
            off = j - int(first)
            if not 0 <= off < 2 * split_nodes.size:
                raise bad_message("'derive_node' names a node that is not a child of the last split")
            parent, sib = int(split_nodes[off // 2]), j + 1 if off % 2 == 0 else j - 1
            ph, pc = t["store"][(p, parent, f)]
            sh, sc = store[(p, sib, f)]
            h, cn = ph - sh, pc - sc
            if (cn < 0).any() or not self.spec.in_bounds(h):
                raise ProtocolIntegrityError(f"histograms of party {p + 1} are inconsistent between levels")
            store[(p, j, f)] = (h, cn)
        t["store"] = store
        split, winner, feat, bins, ml, bits = self._choose(sp, msg, nodes, keep, gains, store)
        starts, ends = tree.bounds(split[winner == self.me])
        # the master learns the splits, their winners and the sizes of its own splits' children;
        # every other party the decision, sealed: its own splits' features and bins, this one's bits
        reply = {"split": split, "winner": winner, "n_left": S.n_left_of(bits, ends - starts)}
        if split.size:
            sealed = []
            for q in others:
                mine = winner == q
                pay = {"split": split, "winner": winner, "bits": bits, "feature": feat[mine], "bin": bins[mine],
                       "missing_left": ml[mine]}
                sealed.append((q, S.DECISION, self.sealer.seal(q, S.DECISION, sp.tree_id, t["level"], pay)))
            reply.update(S.outgoing(sealed))
        return reply

    def _choose(self, sp, msg, nodes, keep, gains, store):
        """The level's splits from its own gains (``gains[self.me]``) and the
        other parties' rebuilt histograms (``store``: (party, node, feature) ->
        (sums, row counts)) under their masks (``msg["pmask"]``, rows
        ``keep`` of the candidates): the split nodes, their winners, the
        winners' features, bins and missing sides, and the partition bits of
        its own splits (the largest gain per node, the lowest party on ties)."""
        t = sp.state
        c = t["nodes"].col
        n_parties = len(self.feature_counts)
        pmask = np.asarray(msg["pmask"], dtype=np.uint8)[keep]
        chosen = {}
        col = 0
        for p in range(n_parties):
            if p == self.me:
                continue
            k = self.feature_counts[p]
            gains[p], chosen[p] = self._evaluate(sp, p, nodes, pmask[:, col:col + k], store)
            col += k
        winner = np.argmax(gains, axis=0) if nodes.size else np.empty(0, dtype=np.int64)
        best = gains[winner, np.arange(nodes.size)]
        do = self.kind.takes(best)
        split, winner = nodes[do], winner[do].astype(np.int32)
        feat = np.full(split.size, -1, dtype=np.int32)
        bins = np.zeros(split.size, dtype=np.int32)
        ml = np.zeros(split.size, dtype=np.uint8)
        for p, (pnodes, pfeat, pbin, pml) in chosen.items():
            mine = np.flatnonzero(winner == p)
            at = np.searchsorted(pnodes, split[mine])
            feat[mine], bins[mine], ml[mine] = pfeat[at], pbin[at], pml[at]
            c["split_feature"][split[mine]] = pfeat[at]
            c["split_bin"][split[mine]] = pbin[at]
        c["owner"][split] = winner
        own = split[winner == self.me]
        t["searched"] = t["own_gain"][0]
        # no split ends the tree: no partition follows
        t["decided"] = split if split.size else None
        t["partitioned"] = own
        bits = sp.partition({"nodes": own})["bits"] if own.size else np.empty(0, dtype=np.uint8)
        t["own_gain"] = None
        if split.size:
            t["decided_winner"], t["own_bits"] = winner, bits
        return split, winner, feat, bins, ml, bits

    def _check_hist(self, h, wb, p):
        """A rebuilt histogram against the plaintext bootstrap weights of its
        bins and the bounds of sums of rows."""
        w = self.spec.weights_of(h)
        if not (np.array_equal(w, wb) and self.spec.in_bounds(h) and not h[w == 0].any()):
            raise ProtocolIntegrityError(f"sums of party {p + 1} do not match its row counts; the "
                                         "ciphertexts were altered or made under another key")

    _half = None   # (decryption modulo the smaller prime, the bits it reads), made at first use

    def _decrypters(self, runs, widths):
        """Per ciphertext of ``runs``, the decryption it needs: modulo the
        key's smaller prime alone for a run of few bits (:func:`half_decrypter`),
        else the full one."""
        if self._half is None:
            self._half = half_decrypter(self.key)
        half, limit = self._half
        full = self.key.decrypt
        ends = np.cumsum([0] + list(widths))
        return [half if half is not None and int(ends[b] - ends[a]) <= limit else full
                for a, b in zip(runs[:-1], runs[1:])]

    def _decrypt_sums(self, sp, blocks, at, weights, what):
        """The statistics of the sums of ``weights`` (their bins' weights) from
        the ciphertexts from ``blocks[at]`` on, as many as their widths take
        (:meth:`~..encrypted_labels.EncryptionSpec.sum_runs`): decrypted, split
        into slots and completed from the weights
        (:meth:`~..encrypted_labels.EncryptionSpec.full_sums`); and that
        number of ciphertexts."""
        widths = self.spec.sum_widths(weights.tolist())
        runs = self.spec.sum_runs(widths)
        n_ct = len(runs) - 1
        if blocks.shape[0] < at + n_ct:
            raise bad_message(f"{what}: {blocks.shape[0] - at} ciphertexts for {len(widths)} sums")
        cts = self.key.public.deserialize(blocks[at:at + n_ct], what) if n_ct else []
        t0 = time.perf_counter()
        try:
            fns = self._decrypters(runs, widths)
            with gil_free():
                plain = P.parallel_map(lambda i: fns[i](cts[i]), range(n_ct), sp.crypto_threads())
            return self.spec.full_sums(self.spec.split_sums(plain, widths, runs), weights), n_ct
        except InputError:
            raise ProtocolIntegrityError(f"{what}: a decrypted value overflows its slots; the "
                                         "ciphertexts were altered or made under another key") from None
        finally:
            with _COUNTS:     # the trees of a batch may be decided on several threads
                self.decrypted += len(cts)
                self.decrypt_seconds += time.perf_counter() - t0

    def _evaluate(self, sp, p, nodes, mask, store):
        """Party ``p``'s best split per node from its rebuilt histograms."""
        t = sp.state
        c = t["nodes"].col
        s = sp.settings
        pairs = [(i, int(f)) for i, row in enumerate(mask) for f in np.flatnonzero(row)]
        n_bins, _ = self.party_bins[p]
        none = (nodes, np.full(nodes.size, -1, np.int32), np.zeros(nodes.size, np.int32),
                np.zeros(nodes.size, np.uint8))
        if not pairs:
            return np.full(nodes.size, -np.inf), none
        hists = np.empty((len(pairs), N_SLOTS_BIN, self.spec.n_stats))
        cnts = np.empty((len(pairs), N_SLOTS_BIN), dtype=np.int64)
        for k, (i, f) in enumerate(pairs):
            h, cn = store[(p, int(nodes[i]), f)]
            hists[k] = sp.labels.to_float(t, h)
            cnts[k] = cn
        pn = np.array([i for i, _ in pairs], dtype=np.int32)
        pf = np.array([f for _, f in pairs], dtype=np.int32)
        starts, ends = t["nodes"].bounds(nodes)
        gain, feat, b, ml = splitter.best_splits_from_hists(
            hists, cnts, pn, pf, n_bins[pf].astype(np.int32), c["stats"][nodes], (ends - starts).astype(np.int64),
            s.is_classification, self.spec.n_stats, s.crit, s.reg_lambda, gain_scale(s, t["total_w"]),
            s.min_samples_leaf, min_leaf_weight(s, t["total_w"]))
        return gain, (nodes, feat, b, ml)

    # -- what the label holder knows of finished trees --------------------
    def row_values(self, sp, t):
        """The value of the leaf every row of tree ``t``'s sample lands in, from
        the tree's state here (rows outside the sample: NaN)."""
        state = sp.state_of(t)
        if state is None:
            raise bad_message(f"tree {t} is not grown here")
        tree = state["nodes"]
        self.ensure_stats(sp, np.arange(tree.n, dtype=np.int32), state)
        c = tree.col
        n = tree.n
        value = self.node_values(sp, c["stats"][:n], c["weight"][:n])[:, 0]
        leaves = np.flatnonzero(c["left"][:n] < 0)
        out = np.full(sp.n_rows, np.nan)
        for j in leaves.tolist():
            out[tree.rows[c["start"][j]:c["end"][j]]] = value[j]
        return out


