"""What the vertical master and parties share: a party's table, helpers, the
tree grower's view of the remote parties, job identity and model folders."""
import hashlib
import json

import numpy as np
from tqdm import tqdm

from ..data.columns import AlignedColumns, read_columns
from ..data.io import pd
from ..data.validation import CLASSIFICATION
from ..errors import InputError
from ..federation.files import write_summary
from ..logs import progress_options, status
from . import model_files
from .messages import Parties

MASTER = 0


def log(cfg, text):
    status(cfg, text)


def progress_bar(cfg, **kw):
    # to a log (FEDFOREST_PROGRESS=1 without a terminal): a plain line now and then, no redraws
    return tqdm(disable=not cfg.progress or cfg.quiet, **{**progress_options(), **kw})


def bar_round(bar, ids):
    """A grower's ``on_round``: the bar shows the batch's exchanges as they happen
    (it moves every level, not only when a batch of trees is stored); drawn at
    most as often as the bar draws (a log gets its line now and then)."""
    count = [0]

    def on_round():
        count[0] += 1
        bar.set_postfix_str(f"trees {ids[0]}-{ids[-1]}: exchange {count[0]}", refresh=False)
        bar.update(0)
    return on_round


def plural_rounds(n):
    return f"{n} round" + ("" if n == 1 else "s")


def report_training(cfg, summary):
    """Name every rank's model folder, write the summary file; returns the summary."""
    log(cfg, "model files: " + "; ".join(f"{'master' if r == 0 else f'party {r}'}: {d}"
                                            for r, d in summary["model_dirs"].items()))
    write_summary(cfg.summary_json, summary)
    return summary


def check_world(comm, cfg):
    cfg.check_world(comm.size, "party")


def check_encrypted_job(cfg):
    """Settings the encrypted modes (``label_privacy = "paillier"``) cannot
    honour, refused before any work: the master relays what the parties tell
    each other sealed, so it can be shown no split."""
    if cfg.master_full_model:
        raise InputError("master_full_model", "the master relays the parties' splits sealed with "
                                              "label_privacy = 'paillier', so it cannot keep a full model; set "
                                              "master_full_model = false (or use label_privacy = 'plain')")


def peak_rss_mb():
    """Peak resident memory of this process so far, in MiB."""
    import resource
    import sys
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb / (1024.0 * 1024.0) if sys.platform == "darwin" else kb / 1024.0


def current_rss_mb():
    """Resident memory of this process now, in MiB (Linux; None elsewhere)."""
    try:
        with open("/proc/self/statm") as fh:
            pages = int(fh.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    import resource
    return pages * resource.getpagesize() / (1024.0 * 1024.0)


def party_what(rank):
    return f"party {rank}"


# ---------------------------------------------------------------------------
# Party data
# ---------------------------------------------------------------------------
class PartyTable:
    """One party's rows: IDs (:class:`~fedforest.crypto.ids.IdTexts`), encoded
    feature columns held column by column (:class:`~fedforest.data.columns.ColumnTable`:
    the file is read in blocks, no float64 matrix of the whole table is made)
    and, for the label party, labels.  :meth:`aligned` hands out the rows of
    the job's order, freeing each stored column as it is taken."""

    def __init__(self, cfg, rank, source, columns=None, categories=None, label_column=None):
        what = party_what(rank)
        self.store = read_columns(source, cfg.id_column, what, label_column=label_column or cfg.label_column,
                                  na_values=cfg.na_values, categorical_columns=cfg.categorical_columns,
                                  columns=columns, categories=categories)
        self.ids = self.store.ids
        self.y = self.store.y
        self.has_label = self.y is not None
        self.columns = self.store.columns
        self.categories, self.n_unseen = self.store.categories, self.store.n_unseen

    def fingerprint(self):
        return self.store.fingerprint()

    def aligned(self, positions):
        """The feature columns of the aligned rows (:class:`AlignedColumns`);
        the IDs are dropped (training needs them no more)."""
        return AlignedColumns(self.store, positions)


def label_array(y, task, what):
    """Labels as a buffer-friendly array (text labels as unicode)."""
    y = np.asarray(y)
    if y.dtype.kind == "O":
        missing = pd.isna(y)
        if missing.any():
            raise InputError(what, f"{int(missing.sum())} rows have no label")
        if task == CLASSIFICATION:
            return y.astype(str)
        try:
            return y.astype(np.float64)
        except (TypeError, ValueError):
            raise InputError(what, "regression labels must be numeric") from None
    return y


# ---------------------------------------------------------------------------
# ID alignment (shared by training and prediction)
# ---------------------------------------------------------------------------
# ---------------------------------------------------------------------------
# Remote parties for the tree grower
# ---------------------------------------------------------------------------
class RemoteParties(Parties):
    """The parties of an MPI (or in-process) job, as seen by the tree grower."""

    def __init__(self, comm):
        self.comm = comm

    def exchange(self, msgs):
        replies = self.comm.exchange({p + 1: m for p, m in enumerate(msgs) if m is not None})
        return [replies.get(p + 1) for p in range(len(msgs))]

    def post(self, msgs):
        """One-way messages (None: none for that party); no reply comes."""
        self.comm.scatter({p + 1: m for p, m in enumerate(msgs) if m is not None})


# ---------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------
def job_id_of(params, cfg, infos):
    doc = {"params": params.to_dict(), "task": cfg.task, "n_parties": cfg.n_parties,
           "parties": [infos[r]["fingerprint"] for r in sorted(infos)],
           "master_full_model": bool(cfg.master_full_model), "label_privacy": cfg.label_privacy}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:32]


def _plain(value):
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def changed_settings(manifest, params, cfg):
    """This job's settings that differ from those a stored model's manifest
    records, as ``"name stored -> now"`` texts."""
    now = _plain(dict(params.to_dict(), mode=cfg.spec.name, task=cfg.task, n_parties=cfg.n_parties,
                      label_privacy=cfg.label_privacy, master_full_model=bool(cfg.master_full_model)))
    stored = _plain(dict(manifest.get("params") or {}, mode=manifest.get("mode", "vertical"),
                         task=manifest.get("task"), n_parties=manifest.get("n_parties"),
                         label_privacy=manifest.get("label_privacy", "plain"),
                         master_full_model=manifest.get("full_model")))
    return [f"{k} {stored.get(k)!r} -> {v!r}" for k, v in sorted(now.items()) if stored.get(k) != v]


def restart_note(folder, manifest, job_id, params, cfg, parties_behind):
    """The line a resumed job with ``overwrite`` logs when it starts again from
    tree 0: why the stored checkpoint does not fit (``manifest``: the master's;
    ``parties_behind``: ranks whose folders hold no checkpoint of this job)."""
    changed = changed_settings(manifest, params, cfg)
    if changed:
        why = f"the model in {folder!r} was trained with other settings ({', '.join(changed)})"
    elif manifest.get("job_id") != job_id:
        why = f"the model in {folder!r} belongs to another job (the parties or their tables differ)"
    else:
        why = f"the model_dir of party {', '.join(map(str, parties_behind))} holds no checkpoint of this job"
    return f"--resume: {why}; overwrite = true: the stored model is replaced and training restarts from tree 0"


def check_model_dir(folder, job_id, resume, overwrite, what):
    """How many finished trees to keep (0 = start fresh); refuses a model of another job."""
    existing = model_files.existing_model(folder)
    if existing is None:
        if resume:
            raise InputError(what, f"--resume given but {folder!r} holds no checkpoint")
        return 0
    if existing.get("job_id") != job_id:
        if overwrite:
            return 0
        raise InputError(what, f"{folder!r} holds a model from another job (job id "
                               f"{existing.get('job_id')}, this job is {job_id}); use another "
                               "model_dir or pass --overwrite")
    if resume:
        return int(existing.get("n_trees", 0))
    if overwrite:
        return 0
    raise InputError(what, f"{folder!r} already holds a model of this job; pass --resume to "
                           "continue it or --overwrite to start again")


def load_role_model(cfg, rank):
    folder = model_files.party_dir(cfg.model_dir, rank)
    what = f"party {rank} model" if rank else "master model"
    m = model_files.read_manifest(folder, what)
    role = "master" if rank == 0 else "party"
    if m.get("role") != role or m.get("rank") != rank:
        raise InputError(what, f"{folder!r} holds the model of {m.get('role')} rank {m.get('rank')}, "
                               f"not of {role} rank {rank}")
    if not m.get("complete"):
        raise InputError(what, f"{folder!r} holds an unfinished training checkpoint "
                               f"({m.get('n_trees')} of {m.get('n_estimators')} trees); resume training first")
    n_columns = max_depth = None
    if rank:   # a party's partial trees reach its prediction kernels: checked first
        columns, params = m.get("columns"), m.get("params")
        if not (isinstance(columns, list) and isinstance(params, dict)):
            raise InputError(what, f"{folder!r} holds a manifest without the party's columns and settings")
        n_columns, max_depth = len(columns), params.get("max_depth")
        if max_depth is not None and (isinstance(max_depth, bool) or not isinstance(max_depth, int)):
            raise InputError(what, f"{folder!r} holds a manifest with max_depth {max_depth!r}")
    n_trees = m.get("n_trees")
    if isinstance(n_trees, bool) or not isinstance(n_trees, int) or n_trees < 1:
        raise InputError(what, f"{folder!r} holds a manifest with n_trees {n_trees!r}")
    return folder, m, model_files.read_trees(folder, n_trees, what, n_columns, max_depth)
