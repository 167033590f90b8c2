"""Model files on disk (format ``fedforest-vertical`` version 2, see docs/model-format.md).

Each rank writes only its own directory ``<model_dir>/master`` or
``<model_dir>/party-<rank>``:

* ``manifest.json`` — format name and version, role, rank, job id, number of
  finished trees and role-specific metadata;
* ``trees/tree-NNNNN.npz`` — one file of flat arrays per finished tree.

Every file is written to a temporary name in the same folder and renamed into
place, so a crash never leaves a half-written file.  The manifest is rewritten
after each batch of trees (the checkpoint), so ``n_trees`` counts only complete trees.
"""
import contextlib
import json
import os
import shutil
import zipfile

import numpy as np

from ..version import __version__
from ..data.io import read_npz
from ..errors import NOTHING_SAVED, InputError, RemoteError, Stopped
from ..federation.files import atomic_write, atomic_write_many

FORMAT = "fedforest-vertical"
FORMAT_VERSION = 2   # 2: with encrypted labels the leaf values are the label holder's
MANIFEST = "manifest.json"


def party_dir(model_dir, rank):
    return os.path.join(model_dir, "master" if rank == 0 else f"party-{rank}")


def write_manifest(folder, manifest):
    data = json.dumps(dict(manifest, format=FORMAT, format_version=FORMAT_VERSION,
                           fedforest_version=__version__), indent=2, sort_keys=True).encode()
    atomic_write(os.path.join(folder, MANIFEST), lambda fh: fh.write(data))


def _tree_path(folder, index):
    return os.path.join(folder, "trees", f"tree-{index:05d}.npz")


def write_tree(folder, index, arrays):
    atomic_write(_tree_path(folder, index), lambda fh: np.savez(fh, **arrays))


def write_trees(folder, trees):
    """Several trees (``(index, arrays)`` pairs) at once, each file atomic."""
    atomic_write_many([(_tree_path(folder, index), lambda fh, a=arrays: np.savez(fh, **a))
                       for index, arrays in trees])


def drop_trees(folder, keep, stored):
    """Delete the tree files ``keep .. stored - 1`` (early stopping keeps the
    best round's trees; write the manifest that counts ``keep`` trees first)."""
    for index in range(keep, stored):
        path = _tree_path(folder, index)
        if os.path.exists(path):
            os.unlink(path)


def read_manifest(folder, what="model"):
    path = os.path.join(folder, MANIFEST)
    if not os.path.isfile(path):
        raise InputError(what, f"{folder!r} holds no model ({MANIFEST} not found)")
    try:
        with open(path, "rb") as fh:
            m = json.load(fh)
    except (OSError, ValueError) as exc:
        raise InputError(what, f"{path!r} is not a model manifest: {exc}") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise InputError(what, f"{path!r} is not a {FORMAT} model manifest")
    if m.get("format_version") != FORMAT_VERSION:
        raise InputError(what, f"{path!r} has model format version {m.get('format_version')!r}; "
                               f"this fedforest reads version {FORMAT_VERSION}")
    return m


def read_trees(folder, n_trees, what="model", n_columns=None, max_depth=None):
    """The trees of a model folder; with ``n_columns`` (a party's columns) each
    is checked as a party's partial tree (:func:`check_partial_tree`) before
    any kernel sees it."""
    trees = []
    for i in range(n_trees):
        path = _tree_path(folder, i)
        try:
            trees.append(read_npz(path))
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            raise InputError(what, f"cannot read tree file {path!r}: {exc or type(exc).__name__}") from None
        if n_columns is not None:
            trees[-1] = check_partial_tree(trees[-1], n_columns, max_depth, f"{what}: tree file {path!r}")
    return trees


PARTIAL_DTYPES = {"children_left": np.int32, "children_right": np.int32, "feature": np.int32,
                  "threshold": np.float64, "missing_left": np.uint8}


def check_partial_tree(tree, n_columns, max_depth, what):
    """A party's partial tree, validated (InputError ``(what, ...)`` otherwise):
    the arrays of :data:`PARTIAL_DTYPES` (and ``importance``, ``gain``, ``cover``) with one entry per
    node; node 0 the root and every other node the child of exactly one earlier
    node; splits with a column of this party (0 .. ``n_columns - 1``) or -1 (another
    party's), leaves -2; at most ``max_depth`` levels (None: no bound)."""
    out = dict(tree)
    for key, dtype in PARTIAL_DTYPES.items():
        a = tree.get(key)
        integral = np.dtype(dtype).kind in "iu"
        if not (isinstance(a, np.ndarray) and a.ndim == 1 and a.dtype.kind in ("iu" if integral else "iuf")):
            raise InputError(what, f"tree array {key!r} is absent or not a list of {np.dtype(dtype)} values")
        if integral and a.size and (a.min() < np.iinfo(dtype).min or a.max() > np.iinfo(dtype).max):
            raise InputError(what, f"tree array {key!r} holds values out of the {np.dtype(dtype)} range")
        out[key] = np.ascontiguousarray(a, dtype=dtype)
    n = out["feature"].shape[0]
    if n == 0:
        raise InputError(what, "the tree has no node")
    for key in PARTIAL_DTYPES:
        if out[key].shape != (n,):
            raise InputError(what, f"tree array {key!r} has {out[key].shape[0]} entries for {n} nodes")
    left, right, feature = out["children_left"], out["children_right"], out["feature"]
    node = np.arange(n)
    split = left >= 0
    if np.any(split != (right >= 0)) or np.any((left < -1) | (right < -1)):
        raise InputError(what, "a node has one child only, or a child index below -1")
    kids = np.concatenate((left[split], right[split])).astype(np.int64)
    parents = np.concatenate((node[split], node[split]))
    if np.any(kids <= parents) or np.any(kids >= n):
        raise InputError(what, "a child is not a later node of the tree")
    if not np.array_equal(np.sort(kids), np.arange(1, n)):
        raise InputError(what, "a node has more than one parent, or no parent (every node but the "
                               "root has exactly one)")
    if np.any(feature[~split] != -2) or np.any((feature[split] < -1) | (feature[split] >= n_columns)):
        raise InputError(what, f"tree array 'feature' holds values other than -2 at leaves and -1 or a "
                               f"column 0..{n_columns - 1} at splits")
    if not np.isin(out["missing_left"], (0, 1)).all():
        raise InputError(what, "tree array 'missing_left' holds values other than 0 and 1")
    for key in ("importance", "gain", "cover"):   # a boosting party's own split statistics
        if key in tree:
            a = tree[key]
            if not (isinstance(a, np.ndarray) and a.shape == (n,) and a.dtype.kind == "f"
                    and np.all(np.isfinite(a))):
                raise InputError(what, f"tree array {key!r} must hold {n} finite numbers")
    hidden = [k for k in ("hidden_feature", "hidden_threshold", "hidden_missing_left") if k in tree]
    if hidden:      # a party's thresholds in the hidden instance space (docs/model-format.md)
        arrays = [tree.get(k) for k in ("hidden_feature", "hidden_threshold", "hidden_missing_left")]
        if len(hidden) != 3 or not all(isinstance(a, np.ndarray) and a.ndim == 1 for a in arrays) \
                or len({a.shape for a in arrays}) != 1:
            raise InputError(what, "tree arrays 'hidden_feature', 'hidden_threshold' and 'hidden_missing_left' "
                                   "must be there together, one entry per threshold")
        f, thr, ml = arrays
        if f.dtype.kind not in "iu" or (f.size and (f.min() < 0 or f.max() >= n_columns)):
            raise InputError(what, f"tree array 'hidden_feature' holds values outside the columns 0..{n_columns - 1}")
        if thr.dtype.kind != "f" or np.isnan(thr).any() or not np.isin(ml, (0, 1)).all():
            raise InputError(what, "tree arrays 'hidden_threshold' (numbers) or 'hidden_missing_left' (0 or 1) "
                                   "hold other values")
        out["hidden_feature"] = f.astype(np.int32)
        out["hidden_threshold"] = thr.astype(np.float64)
        out["hidden_missing_left"] = ml.astype(np.uint8)
    if max_depth is not None:
        level, depth = np.zeros(1, dtype=np.int64), 0
        while level.size:   # the nodes of each level in turn (a tree: each node met once)
            level = np.concatenate((left[level], right[level]))
            level = level[level >= 0].astype(np.int64)
            depth += bool(level.size)
            if depth > max_depth:
                raise InputError(what, f"the tree is deeper than max_depth = {max_depth}")
    return out


def existing_model(folder):
    """The manifest of a model already in ``folder`` (None if there is none)."""
    if not os.path.isfile(os.path.join(folder, MANIFEST)):
        return None
    return read_manifest(folder)


def clear(folder):
    if os.path.isdir(folder):
        for name in os.listdir(folder):
            if name.startswith(".tmp-"):  # left by an interrupted write
                os.unlink(os.path.join(folder, name))
    for name in (MANIFEST, "trees"):
        p = os.path.join(folder, name)
        if os.path.isdir(p):
            shutil.rmtree(p)
        elif os.path.exists(p):
            os.unlink(p)


@contextlib.contextmanager
def kept_on_stop(folder, total, unit="trees", per=1):
    """Around a master's training loop: a signal that stops it (SIGTERM,
    Ctrl-C) leaves as :class:`~fedforest.errors.Stopped` telling how much of
    the model the last complete checkpoint in ``folder`` holds (its manifest's
    trees, divided by ``per``, of ``total`` ``unit``; :data:`~fedforest.errors.NOTHING_SAVED`
    before the first), for the master's one line.  A party's report that a
    signal stopped it (:class:`~fedforest.errors.RemoteError`) learns the same."""
    try:
        yield
    except BaseException as exc:
        stop = Stopped.of(exc)
        stopped_party = isinstance(exc, RemoteError) and exc.exc_type == "Stopped"
        if stop is None and not stopped_party:
            raise
        try:
            n = int((existing_model(folder) or {}).get("n_trees", 0)) // per
        except (InputError, OSError, ValueError, TypeError):
            n = None
        kept = None if n is None else f"{n} of {total} {unit} in {folder}" if n else NOTHING_SAVED
        if stop is None:
            exc.kept = kept
            raise
        stop.kept = kept
        if stop is exc:
            raise
        raise stop from None


class CheckpointWriter:
    """Writes finished trees and the manifest from a background thread, so disk
    syncs overlap the growth of the next tree.  The trees waiting when the
    writer gets to them are written together (:func:`write_trees`: one
    concurrent sync of their files, then the manifest once).  Writes stay in
    order; an error in the writer is raised by the next :meth:`submit` or by
    :meth:`close`."""

    def __init__(self, folder):
        import queue
        import threading
        self.folder = folder
        self._queue = queue.Queue()
        self._error = None
        self._thread = threading.Thread(target=self._run, name="fedforest-checkpoint", daemon=True)
        self._thread.start()

    def _run(self):
        import queue
        done = False
        while not done:
            items = [self._queue.get()]
            # every tree submitted meanwhile goes in the same write: the files are
            # synced together and the manifest once (as a party writes its batch)
            while items[-1] is not None:
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            if items[-1] is None:
                done = True
                items.pop()
            items = [tree for batch in items for tree in batch]
            if self._error is not None or not items:
                continue
            try:
                write_trees(self.folder, [(index, arrays) for index, arrays, _ in items])
                write_manifest(self.folder, items[-1][2])
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                self._error = exc

    def _raise(self):
        if self._error is not None:
            raise self._error

    def submit(self, index, arrays, manifest):
        self.submit_batch([(index, arrays, manifest)])

    def submit_batch(self, trees):
        """Several ``(index, arrays, manifest)`` trees, written together (the
        last manifest is the one kept)."""
        self._raise()
        if trees:
            self._queue.put(list(trees))

    def close(self):
        """Wait for every pending write; raise the writer's error if any."""
        self._queue.put(None)
        self._thread.join()
        self._raise()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        """Leaving on an error still finishes the writes already submitted (the
        trees every party stored stay a consistent checkpoint); the first error wins."""
        if exc_type is None:
            self.close()
            return
        try:
            self.close()
        except BaseException:  # noqa: BLE001 - the error that stopped the training is the one to report
            pass
