"""FedGA-Tree's roles (mode ``fedga``; see the package docstring and docs/fedga.md).

Set-up: the job-wide encoding (numeric columns as numbers, text columns as
category codes).  Round 1 (the first active clients): each runs a K-fold
cross-validation of CART depths and proposes its best depth, and sends its
row count plus Laplace noise.  Round 2: the server sends the median depth;
each client sends its own CART structure at that depth (regression: and its
votes of Eq. 1 and 2).  Rounds 3..G+2: one per generation; each active client
fits thresholds and leaf values of the candidates it has not scored yet on
its fit rows and returns their fitness on its validation rows.  Last round:
the final population goes to every client, which keeps the structure that
scores best on its own rows, refits it on all its training rows (or, with
``refit`` false, keeps the tree it scored, fitted on its fit rows) and saves it.
"""
import math
import time

import numpy as np

from ...data.validation import label_text, positive_class_index
from ...errors import InputError
from ...federation import protocol
from ...federation.aggregate import client_metrics
from ...federation.files import replaced_folder, write_summary
from ...federation.rounds import SERVER, Done, ask, serve
from ...tree import format as tree_format
from ...tree import structure
from ...tree.rules import NUMERIC, Rule, leaf_rules
from ..encoding import MIXED, client_what, text_of
from ..message_checks import (bad_message, field_of, job_seed_of, number_array, same_settings, true_or_false,
                              whole_number)
from ..model_files import client_dir, explain as tree_explain, save_model
from ..setup import client_setup, job_seed, log, server_setup
from . import CLASSIFICATION_POPULATION, REGRESSION_POPULATION, compare, ga, n_active

PROPOSE = "propose_depth"    # server -> client: cross-validate depths, send yours and your noisy size
STRUCTURE = "structure"      # server -> client: the global depth; send your CART structure (and votes)
EVALUATE = "evaluate"        # server -> client: fit these structures and send their fitness
LABEL_COUNTS = "label_counts"  # server -> client (set-up, two classes, no positive_class): rows per class
POSITIVE = "positive_class"  # server -> client (set-up, after label_counts): the code of the positive class



# ---------------------------------------------------------------------------
# What every role of the package's modes does with a client's rows
# ---------------------------------------------------------------------------
def is_classification(enc):
    return enc.task != "regression"


def n_classes(enc):
    return len(enc.classes) if is_classification(enc) else 0


def bin_edges(X, enc, n_bins):
    """Per column the inner bin edges (numeric columns) or None (text columns)."""
    cats = enc.categories or [None] * X.shape[1]
    return [ga.fit_bins(X[:, j], n_bins).tolist() if cats[j] is None else None for j in range(X.shape[1])]


def cart(X, y, enc, depth, seed):
    """scikit-learn's CART of depth ``depth`` as a flat tree (class fractions or means)."""
    from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor  # a second to import
    if is_classification(enc):
        est = DecisionTreeClassifier(max_depth=depth, random_state=seed).fit(X, y)
        return tree_format.from_sklearn(est, n_classes(enc))
    est = DecisionTreeRegressor(max_depth=depth, random_state=seed).fit(X, y)
    t = est.tree_
    return tree_format.binary(t.children_left, t.children_right, t.feature, t.threshold, t.value[:, 0, 0],
                              n_node_samples=t.n_node_samples)


def predictions(tree, X, enc):
    values = tree_format.node_values(tree, X)
    return values.argmax(axis=1) if is_classification(enc) else values[:, 0]


def score(y, pred, enc, positive=1):
    """Fitness, higher is better: F1 (of class code ``positive`` for two
    classes, else macro) or minus the MSE."""
    if is_classification(enc):
        return ga.f1_score(y, pred, n_classes(enc), positive)
    return -ga.mse(y, pred)


def metrics(y, pred, enc, positive=1):
    if is_classification(enc):
        return {"accuracy": float(np.mean(y == pred)), "f1": ga.f1_score(y, pred, n_classes(enc), positive)}
    from sklearn.metrics import r2_score
    return {"mse": ga.mse(y, pred), "r2": float(r2_score(y, pred)) if len(y) > 1 else 0.0}


def cv_scores(X, y, enc, depths, folds, seed, positive=1):
    """``scores[k, j]``: fold k's validation score (F1 as in :func:`score`, or
    R^2) of a CART of depth ``depths[j]``."""
    from sklearn.metrics import r2_score
    from sklearn.model_selection import KFold, StratifiedKFold
    clf = is_classification(enc)
    if clf:
        counts = np.bincount(y.astype(np.int64))
        stratify = counts[counts > 0].min() >= folds
    else:
        stratify = False
    splitter = (StratifiedKFold if stratify else KFold)(n_splits=folds, shuffle=True, random_state=seed)
    out = np.zeros((folds, len(depths)))
    for k, (tr, va) in enumerate(splitter.split(X, y)):
        for j, d in enumerate(depths):
            pred = predictions(cart(X[tr], y[tr], enc, d, seed), X[va], enc)
            out[k, j] = ga.f1_score(y[va], pred, n_classes(enc), positive) if clf else \
                (r2_score(y[va], pred) if len(va) > 1 else 0.0)
    return out


def best_depth(scores, depths):
    """The depth of the best mean score (the smallest on a tie)."""
    mean = np.asarray(scores).mean(axis=0)
    return int(depths[int(np.argmax(mean))])


class ClientRows:
    """A client's rows after the job's encoding (and binning): training rows,
    optional test rows, the bin edges, its seed and the code of the job's
    positive class (two classes; 1 otherwise, unused)."""

    def __init__(self, comm, cfg, setup, enc, X, y, test):
        self.comm, self.cfg, self.setup, self.enc = comm, cfg, setup, enc
        self.rank = comm.rank
        self.seed = int(setup["seed"]) + self.rank
        self.positive = int(setup.get("positive", 1))
        self.raw_X, self.raw_test = X, test
        self.edges = bin_edges(X, enc, setup["n_bins"]) if setup.get("binning") else None
        self.X = ga.apply_bins(X, self.edges) if self.edges else X
        self.y = y
        self.test = None
        if test is not None:
            self.test = (ga.apply_bins(test[0], self.edges) if self.edges else test[0], test[1])
        self.bytes0 = comm.bytes_sent

    def cv(self, X=None, y=None):
        s = self.setup
        depths = list(range(s["min_depth"], s["max_depth"] + 1))
        scores = cv_scores(self.X if X is None else X, self.y if y is None else y, self.enc, depths,
                           s["cv_folds"], self.seed, self.positive)
        return depths, scores

    def evaluate(self, tree):
        """``tree``'s metrics on the training (and test) rows and its decision nodes."""
        enc = self.enc
        out = {"train": metrics(self.y, predictions(tree, self.X, enc), enc, self.positive),
               "decision_nodes": structure.decision_nodes(tree)}
        if self.test is not None:
            out["test"] = metrics(self.test[1], predictions(tree, self.test[0], enc), enc, self.positive)
        return out

    def finish(self, tree, extra=None):
        """Evaluate ``tree`` on the training (and test) rows, save it; the final reply."""
        enc = self.enc
        reply = self.evaluate(tree)
        reply["train_rows"] = int(self.X.shape[0])
        if self.test is not None:
            reply["test_rows"] = int(self.test[0].shape[0])
        reply.update(extra or {})
        folder = client_dir(self.cfg.model_dir, self.rank)
        with replaced_folder(folder) as stage:      # the old model gives way only to a complete new one
            save_model(stage, {"mode": self.setup["mode"], "encoding": enc.to_dict(),
                               "label_column": self.cfg.label_column, "tree": tree, "client": self.rank,
                               "bin_edges": self.edges, "metrics": reply,
                               "positive_class": positive_name(enc, self.positive)})
        reply.update(model_dir=folder, bytes_sent=self.comm.bytes_sent - self.bytes0)
        return Done(folder, reply)


def setup_settings(cfg, name, enc):
    """The settings of the ``setup`` message of mode ``name`` (the same on the
    server and on every client: each client checks the server's against its own)."""
    v = cfg.values
    out = {"mode": name, "binning": bool(v.get("binning", name == "ibm_tree")) and is_classification(enc),
           "n_bins": v.get("n_bins", 5), "min_depth": v.get("min_depth", 1),
           "max_depth": v.get("max_depth"), "cv_folds": v.get("cv_folds", 5)}
    if is_classification(enc):
        pos = v.get("positive_class")
        out["positive_class"] = None if pos is None else label_text(pos)
    if name == "fedga":
        out.update(train_ratio=float(cfg.train_ratio), refit=bool(cfg.refit), epsilon=float(cfg.epsilon),
                   phi_threshold=float(cfg.phi_threshold), theta_threshold=float(cfg.theta_threshold),
                   unique_threshold=float(cfg.unique_threshold))
    return out


def start_server(comm, cfg, name):
    """The set-up every mode of the package shares: encoding, row checks and the
    ``setup`` message.  Returns (clients, infos, enc, setup)."""
    infos, enc = server_setup(comm, cfg, MIXED, cfg.task)
    clients = comm.clients
    folds = cfg.values.get("cv_folds")
    for r in clients:
        if folds is not None and infos[r]["n_rows"] < folds:
            raise InputError(client_what(r), f"has {infos[r]['n_rows']} rows, fewer than the {folds} "
                                             "cross-validation folds (cv_folds)")
    given = cfg.values.get("positive_class")
    if given is not None:           # a clear error before any work
        if len(enc.classes) != 2:
            raise InputError("positive_class", f"applies to two classes; the clients' labels hold "
                                               f"{len(enc.classes)}: {enc.classes} (F1 is macro-averaged)")
        positive_class_index(enc.classes, given)
    setup = {"op": protocol.SETUP, "encoding": enc.to_dict(), "seed": job_seed(cfg),
             **setup_settings(cfg, name, enc)}
    comm.bcast(setup)
    setup = dict(setup, **server_positive(comm, cfg, enc, given))
    return clients, infos, enc, setup


def positive_name(enc, code):
    """The name of the positive class (two classes), else None."""
    return enc.classes[code] if is_classification(enc) and len(enc.classes) == 2 else None


def server_positive(comm, cfg, enc, given):
    """The job's positive class (two classes): ``positive_class`` when set,
    else the minority class of the clients' label counts, pooled (one set-up
    round, then its code to every client).  Returns ``{"positive": code}`` and
    what the summary records about it."""
    if not is_classification(enc) or len(enc.classes) != 2:
        return {"positive": 1, "positive_summary": {}}
    if given is not None:
        code = positive_class_index(enc.classes, given)
        return {"positive": code,
                "positive_summary": {"positive_class": enc.classes[code], "positive_class_from": "setting"}}
    replies = ask(comm, LABEL_COUNTS)
    pooled = np.zeros(2)
    for r in comm.clients:
        counts = replies[r].get("counts") if isinstance(replies[r], dict) else None
        try:
            counts = np.asarray(counts, dtype=np.float64)
        except (TypeError, ValueError):
            counts = np.empty(0)
        if counts.shape != (2,) or not np.isfinite(counts).all() or counts.min() < 0:
            raise InputError(client_what(r), "sent label counts that are not two counts")
        pooled += counts
    code = positive_class_index(enc.classes, None, pooled)
    comm.bcast({"op": POSITIVE, "positive": code})
    return {"positive": code,
            "positive_summary": {"positive_class": enc.classes[code],
                                 "positive_class_from": "minority of the pooled label counts",
                                 "label_counts": {c: int(n) for c, n in zip(enc.classes, pooled)}}}


def client_positive(comm, cfg, enc, y):
    """The client side of :func:`server_positive`: the code of the positive
    class (1 when there are not two classes)."""
    if not is_classification(enc) or len(enc.classes) != 2:
        return 1
    given = cfg.values.get("positive_class")
    if given is not None:
        return positive_class_index(enc.classes, given)
    protocol.expect(comm.recv(SERVER), LABEL_COUNTS)
    comm.send(SERVER, {"counts": np.bincount(np.asarray(y, dtype=np.int64), minlength=2)[:2]})
    msg = protocol.expect(comm.recv(SERVER), POSITIVE)
    return whole_number(POSITIVE, "positive", field_of(msg, POSITIVE, "positive"), 0, 1)


def start_client(comm, cfg):
    """Client start-up of every mode of the package: the ``setup`` message checked
    against this client's settings.  Returns :class:`ClientRows`."""
    setup, enc, X, y, test = client_setup(comm, cfg, MIXED, cfg.task)
    checked = same_settings(setup, protocol.SETUP, setup_settings(cfg, cfg.mode, enc))
    checked["seed"] = job_seed_of(setup, protocol.SETUP, cfg)
    checked["positive"] = client_positive(comm, cfg, enc, y)
    return ClientRows(comm, cfg, checked, enc, X, y, test)


def finish_server(comm, cfg, summary, final, t0, rounds0, bytes0):
    """Summary of the final replies; written to ``summary_json``."""
    clients = sorted(final)
    summary["rounds"] = comm.rounds - rounds0
    summary["bytes_sent_by_server"] = comm.bytes_sent - bytes0
    summary["bytes_sent_by_clients"] = {r: final[r]["bytes_sent"] for r in clients}
    summary["decision_nodes"] = {r: final[r]["decision_nodes"] for r in clients}
    for part in ("train", "test"):
        per = {r: final[r][part] for r in clients if final[r].get(part)}
        if per:
            summary[f"{part}_metrics"] = per
            summary.update({f"{part}_{m}": v for m, v in client_metrics(per).items()})
    which = "test" if "test_metrics" in summary else "train"
    metric = "f1" if summary["task"] == "classification" else "mse"
    if all("local" in final[r] for r in clients):    # fedga: each client's local tree beside its own
        summary["local_depths"] = {r: final[r]["local"]["depth"] for r in clients}
        summary["local_decision_nodes"] = {r: final[r]["local"]["decision_nodes"] for r in clients}
        for part in ("train", "test"):
            per = {r: final[r]["local"][part] for r in clients if final[r]["local"].get(part)}
            if per:
                summary[f"local_{part}_metrics"] = per
        fed = [summary[f"{which}_metrics"][r][metric] for r in clients]
        local = [summary[f"local_{which}_metrics"][r][metric] for r in clients]
        summary["vs_local"] = dict(compare.against_local(fed, local, metric != "mse", names=clients),
                                   scored_on=which, metric=metric)
    summary["model_dirs"] = {r: final[r]["model_dir"] for r in clients}
    summary["seconds"] = time.perf_counter() - t0
    log(cfg, f"{summary['mode']}: mean client {which} {metric} {summary[f'{which}_{metric}']:.4f} "
             f"({summary['rounds']} rounds, {summary['seconds']:.2f}s)")
    if "vs_local" in summary:
        for line in compare.describe(summary["vs_local"], metric, which):
            log(cfg, line)
    write_summary(cfg.summary_json, summary)
    return summary


# ---------------------------------------------------------------------------
# Server
# ---------------------------------------------------------------------------
def server_train(comm, cfg):
    t0 = time.perf_counter()
    clients, infos, enc, setup = start_server(comm, cfg, "fedga")
    clf = is_classification(enc)
    P = cfg.population_size or (CLASSIFICATION_POPULATION if clf else REGRESSION_POPULATION)
    n_features = len(enc.columns)
    rng = np.random.default_rng([setup["seed"], 0])
    k = n_active(cfg.participation, len(clients))
    rounds0, bytes0 = comm.rounds, comm.bytes_sent
    summary = {"mode": "fedga", "task": enc.task, "n_clients": len(clients), "population_size": P,
               "random_state": setup["seed"],
               "generations": cfg.generations, "active_per_generation": k,
               "rows": {r: infos[r]["n_rows"] for r in clients}, **setup["positive_summary"]}

    # initialization: depths and noisy sizes, then the clients' structures (and votes)
    first = ga.choose_active(rng, clients, k)
    props = ask(comm, PROPOSE, clients=first)
    depths = [props[r]["depth"] for r in first]
    depth = int(np.floor(np.median(depths) + 0.5))
    sizes = {r: float(props[r]["size"]) for r in first}
    structs = ask(comm, STRUCTURE, {"depth": depth}, clients=first)
    own = {r: structure.canonicalize(structs[r]["structure"]) for r in first}
    use_all, elitism = False, False
    if not clf:
        use_all = sum(structs[r]["vote_all_rows"] for r in first) > len(first) / 2
        elitism = sum(structs[r]["vote_elitism"] for r in first) > len(first) / 2
    L = structure.string_length(depth)
    m1 = ga.n_mutations(cfg.flip_fraction, L)
    m2 = ga.n_mutations(cfg.swap_fraction, L)
    log(cfg, f"fedga: {len(clients)} clients ({k} active per generation), proposed depths {depths} -> "
             f"{depth}; population {P}, {cfg.generations} generations"
             + (f"; regression: score on all rows {use_all}, elitism {elitism}" if not clf else ""))
    pending = np.concatenate([np.array([own[r] for r in first], dtype=np.int32).reshape(-1, L),
                              structure.random_structures(rng, max(P - len(first), 0), depth, n_features,
                                                          cfg.leaf_ratio)])
    cache = {r: {} for r in clients}        # per client: structure key -> fitness
    gene_type = np.int16 if n_features < 2 ** 15 else np.int32   # what a string weighs on the wire
    parents = parent_fit = None
    history = []
    fitted = 0
    g_bytes0 = comm.bytes_sent
    g_t0 = time.perf_counter()
    for g in range(1, cfg.generations + 1):
        active = first if g == 1 else ga.choose_active(rng, clients, k)
        parts = [pending] if parents is None else [parents, pending]
        if elitism:
            parts.append(np.array(list(own.values()), dtype=np.int32).reshape(-1, L))
        cands = np.concatenate(parts)
        keys = [ga.key(c) for c in cands]
        unique = {}
        for kk, c in zip(keys, cands):
            unique.setdefault(kk, c)
        per_client = {}
        for r in active:
            todo = [kk for kk in unique if kk not in cache[r]]
            msg = {"structures": np.array([unique[kk] for kk in todo], dtype=gene_type).reshape(-1, L),
                   "use_all": use_all}
            if r not in own:
                msg["join"] = depth
            per_client[r] = (todo, msg)
        replies = ask(comm, EVALUATE, per_client={r: m for r, (_, m) in per_client.items()}, clients=active)
        joined = []
        for r in active:
            todo = per_client[r][0]
            fit = np.asarray(replies[r]["fitness"], dtype=np.float64)
            if fit.shape != (len(todo),):
                raise InputError(client_what(r), f"sent {fit.shape} fitness values for {len(todo)} structures")
            cache[r].update(zip(todo, fit.tolist()))
            fitted += len(todo)
            if "structure" in replies[r]:
                own[r] = structure.canonicalize(replies[r]["structure"])
                sizes[r] = float(replies[r]["size"])
                joined.append(own[r])
        fitness = ga.weighted_fitness({r: [cache[r][kk] for kk in keys] for r in active}, sizes)
        elites = {ga.key(s) for s in own.values()} if elitism else ()
        parents, parent_fit = ga.update(cands, fitness, P, elites)
        pending, operator = ga.offspring(rng, parents, parent_fit, P, cfg.tournament_size, m1, m2, n_features)
        if joined:   # a new client's structure competes from the next generation on
            pending = np.concatenate([pending, np.array(joined, dtype=np.int32).reshape(-1, L)])
        history.append({"generation": g, "active": len(active), "active_clients": list(active),
                        "best": float(parent_fit[0]),
                        "mean": float(parent_fit.mean()), "operator": operator,
                        "fitted": int(sum(len(per_client[r][0]) for r in active))})
    g_seconds = time.perf_counter() - g_t0
    gen_bytes = comm.bytes_sent - g_bytes0
    final = ask(comm, protocol.FINAL, {"population": parents, "depth": depth, "use_all": use_all})
    summary.update(
        depth=depth, proposed_depths={r: props[r]["depth"] for r in first}, score_on_all_rows=bool(use_all),
        refit=bool(setup["refit"]),
        elitism=bool(elitism), history=history, best_fitness=float(parent_fit[0]),
        population=parents.tolist(), structures_fitted=fitted,
        seconds_per_generation=g_seconds / cfg.generations,
        server_bytes_per_generation=gen_bytes / cfg.generations,
        chosen_structure={r: final[r]["chosen"] for r in clients}, noisy_sizes=sizes,
        population_fitness={r: final[r]["population_fitness"] for r in clients},
        edit_distance={r: final[r]["edit_distance"] for r in clients})
    bytes_from_clients = sum(final[r]["eval_bytes"] for r in clients)
    summary["bytes_per_generation"] = (gen_bytes + bytes_from_clients) / cfg.generations
    return finish_server(comm, cfg, summary, final, t0, rounds0, bytes0)


# ---------------------------------------------------------------------------
# Client
# ---------------------------------------------------------------------------
class Strings:
    """The checks of the structure strings and depths the server sends a client
    (``depth`` in ``structure``, ``join``, ``final``; ``structures``;
    ``population``): one global depth within this client's min_depth..max_depth,
    strings of its length with columns of this job (or NIL), at most as many
    as the population can hold."""

    def __init__(self, cfg, enc, setup):
        self.lo, self.hi = int(setup["min_depth"]), int(setup["max_depth"])
        self.n_features = len(enc.columns)
        self.size = cfg.population_size or (CLASSIFICATION_POPULATION if is_classification(enc)
                                            else REGRESSION_POPULATION)
        self.clf = is_classification(enc)
        self.depth = None

    def global_depth(self, op, field, v):
        d = whole_number(op, field, v, self.lo, self.hi)
        if self.depth is not None and d != self.depth:
            raise bad_message(op, field, f"the job's depth is {self.depth}, not {d}")
        self.depth = d
        return d

    def strings(self, op, field, v, rows=None):
        if self.depth is None:
            raise bad_message(op, field, "structures before the job's depth")
        pop = number_array(op, field, v, "iu", shape=(rows, structure.string_length(self.depth)), dtype=np.int32)
        if pop.size and (pop.min() < structure.NIL or pop.max() >= self.n_features):
            raise bad_message(op, field, f"genes must be columns 0..{self.n_features - 1} or {structure.NIL}")
        return pop

    def use_all(self, op, v):
        v = true_or_false(op, "use_all", v)
        if v and self.clf:
            raise bad_message(op, "use_all", "classification scores on the validation rows")
        return v


def client_train(comm, cfg):
    c = start_client(comm, cfg)
    s, enc = c.setup, c.enc
    clf = is_classification(enc)
    rng = np.random.default_rng([s["seed"], c.rank])
    fit_rows, val_rows = ga.split_rows(rng, c.y, s["train_ratio"], stratify=clf)
    state = {"own": None}
    all_rows = np.arange(c.X.shape[0])
    check = Strings(cfg, enc, s)
    # candidates of a generation: parents and offspring (population_size each), the
    # structures of joining clients and, under elitism, the clients' own structures
    max_candidates = 2 * check.size + 2 * cfg.n_parties

    def scored(pop, use_all):
        """The trees of ``pop`` fitted on the fit rows (a batch) and their fitness on the held-out rows."""
        pop = np.asarray(pop, dtype=np.int32)
        if pop.shape[0] == 0:
            return None, np.empty(0)
        rows_fit, rows_val = (all_rows, all_rows) if use_all else (fit_rows, val_rows)
        batch = structure.fit_batch(c.X, c.y, rows_fit, pop, n_classes(enc))
        Xv, yv = c.X[rows_val], c.y[rows_val]
        return batch, np.array([score(yv, predictions(structure.batch_tree(batch, p), Xv, enc), enc, c.positive)
                                for p in range(pop.shape[0])])

    def fitness(pop, use_all):
        return scored(pop, use_all)[1]

    def own_structure(depth):
        if state["own"] is None or state["own_depth"] != depth:
            state["own"] = structure.encode(cart(c.X, c.y, enc, depth, c.seed), depth)
            state["own_depth"] = depth
        return state["own"]

    def cross_validated():
        if "cv" not in state:
            state["cv"] = c.cv()
        return state["cv"]

    def propose(msg):
        depths, scores = cross_validated()
        return {"depth": best_depth(scores, depths), "size": ga.noisy_size(rng, c.X.shape[0], s["epsilon"])}

    def send_structure(msg):
        depth = check.global_depth(STRUCTURE, "depth", field_of(msg, STRUCTURE, "depth"))
        reply = {"structure": own_structure(depth)}
        if not clf:
            if "cv" not in state:
                raise bad_message(STRUCTURE, "op", f"{STRUCTURE!r} before {PROPOSE!r}")
            depths, scores = state["cv"]
            reply["vote_all_rows"], _, _ = ga.vote_all_rows(scores, depths.index(depth), s["phi_threshold"],
                                                            s["theta_threshold"])
            reply["vote_elitism"], _ = ga.vote_elitism(c.y, s["unique_threshold"])
        return reply

    def evaluate(msg):
        state.setdefault("eval_start", comm.bytes_sent)
        join = check.global_depth(EVALUATE, "join", msg["join"]) if "join" in msg else None
        pop = check.strings(EVALUATE, "structures", field_of(msg, EVALUATE, "structures"))
        if pop.shape[0] > max_candidates:
            raise bad_message(EVALUATE, "structures", f"{pop.shape[0]} structures; a generation has at most "
                                                    f"{max_candidates}")
        reply = {"fitness": fitness(pop, check.use_all(EVALUATE, field_of(msg, EVALUATE, "use_all")))}
        if join is not None:
            reply["structure"] = own_structure(join)
            reply["size"] = ga.noisy_size(rng, c.X.shape[0], s["epsilon"])
        return reply

    def final(msg):
        depth = check.global_depth(protocol.FINAL, "depth", field_of(msg, protocol.FINAL, "depth"))
        pop = check.strings(protocol.FINAL, "population", field_of(msg, protocol.FINAL, "population"),
                            rows=check.size)
        batch, scores = scored(pop, check.use_all(protocol.FINAL, field_of(msg, protocol.FINAL, "use_all")))
        best = int(np.argmax(scores))
        if s["refit"]:      # the chosen structure on all training rows; else the tree it scored
            tree = structure.batch_tree(structure.fit_batch(c.X, c.y, all_rows, pop[best:best + 1], n_classes(enc)), 0)
        else:
            tree = structure.batch_tree(batch, best)
        dist = structure.preorder_distance(pop[best], own_structure(depth))
        # the local baseline (mode fedga_local's tree: CART of this client's cross-validated
        # depth), scored beside the federated tree; not saved
        depths, cv = cross_validated()
        local_depth = best_depth(cv, depths)
        local = dict(c.evaluate(cart(c.X, c.y, enc, local_depth, c.seed)), depth=local_depth)
        return c.finish(tree, {"chosen": best, "population_fitness": scores.tolist(),
                               "structure": pop[best].tolist(), "edit_distance": dist, "local": local,
                               "eval_bytes": comm.bytes_sent - state.get("eval_start", comm.bytes_sent)})

    return serve(comm, {PROPOSE: propose, STRUCTURE: send_structure, EVALUATE: evaluate,
                        protocol.FINAL: final})


# ---------------------------------------------------------------------------
# Local prediction and explanation of a saved model
# ---------------------------------------------------------------------------
def predict_proba(doc, X):
    """Class fractions (classification) or values (regression) of a saved tree."""
    edges = doc.get("bin_edges")
    X = ga.apply_bins(X, edges) if edges else np.asarray(X, dtype=np.float64)
    values = tree_format.node_values(doc["tree"], X)
    return values[:, 0] if doc["encoding"].task == "regression" else values


def binned_condition(name, lo, hi, edges):
    """The condition ``lo < code <= hi`` on a column binned over the inner
    edges ``edges`` (code k: ``edges[k-1] <= x < edges[k]``, as
    :func:`.ga.apply_bins`), in the column's own units: a list of
    ``"name >= a"`` / ``"name < b"`` (empty: every value)."""
    m = len(edges)
    first = math.floor(lo) + 1 if lo > -math.inf else 0     # the lowest code with code > lo
    last = math.floor(hi) if hi < math.inf else m           # the highest code with code <= hi
    parts = []
    if first >= 1:
        parts.append(f"{name} >= {float(edges[min(first, m) - 1]):.6g}")
    if last < m:
        parts.append(f"{name} < {float(edges[max(last, 0)]):.6g}")
    return parts


def rule_conditions(rule, enc, edges):
    """A rule's conditions as text: binned columns in their own units (bin
    edges, :func:`binned_condition`), text columns as sets of categories."""
    parts = []
    for f in sorted(rule.conditions):
        if edges and edges[f] is not None:
            parts += binned_condition(enc.columns[f], *rule.conditions[f], edges[f])
        else:
            one = Rule({f: rule.conditions[f]}, rule.dist, kind=NUMERIC)
            parts.append(one.text(names=enc.columns, categories=enc.categories, joiner=" AND ", empty=""))
    return " AND ".join(p for p in parts if p) or "always"


def explain(doc, X=None, raw=None, row=None):
    """The saved tree as rules; with a row, the rule that decided it.  A
    binned model's conditions are in the columns' own units (its bin edges);
    text columns are sets of categories."""
    enc = doc["encoding"]
    edges = doc.get("bin_edges")
    Xb = ga.apply_bins(X, edges) if (X is not None and edges) else X
    clf = enc.task != "regression"
    if not edges and clf:
        return tree_explain(doc, Xb, raw, row)
    rules = leaf_rules(doc["tree"], NUMERIC)
    order = sorted(rules)

    def outcome(rule):
        return enc.classes[int(np.argmax(rule.dist))] if clf else f"{float(rule.dist[0]):g}"

    def text(rule):
        return rule_conditions(rule, enc, edges)

    lines = [f"{doc['mode']} model ({enc.tree_type}, {len(rules)} rules, classes {enc.classes}):" if clf else
             f"{doc['mode']} model (regression, {len(rules)} rules):"]
    for k, n in enumerate(order, start=1):
        lines.append(f"  rule {k}: IF {text(rules[n])} THEN {outcome(rules[n])}")
    if Xb is not None:
        leaf = int(tree_format.apply(doc["tree"], np.asarray(Xb, dtype=np.float64))[0])
        if raw is not None and clf:
            shown = ", ".join(f"{enc.columns[f]}={text_of(raw[enc.columns[f]])}"
                              for f in sorted(rules[leaf].conditions))
            lines.append(f"row {row} ({shown or 'no conditions'}) is decided by rule {order.index(leaf) + 1}: "
                         f"IF {text(rules[leaf])} THEN {outcome(rules[leaf])}")
        else:
            lines.append(f"row {row} is decided by rule {order.index(leaf) + 1}")
    if edges:
        lines.append(f"numeric columns are binned ({len([e for e in edges if e is not None])} columns, bins fitted "
                     "on this client's training rows): a condition '>= a' or '< b' is a bin edge in the column's "
                     "units (a value equal to an edge falls in the bin above it); the edges are in model.json")
    return "\n".join(lines)
