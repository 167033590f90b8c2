"""Model files on disk (format ``fedforest-vertical`` version 1, see docs/model-format.md).

Each rank writes only its own directory ``<model_dir>/master`` or
``<model_dir>/party-<rank>``:

* ``manifest.json`` — format name and version, role, rank, job id, number of
  finished trees and role-specific metadata;
* ``trees/tree-NNNNN.npz`` — one file of flat arrays per finished tree.

Every file is written to a temporary name in the same folder and renamed into
place, so a crash never leaves a half-written file.  The manifest is rewritten
after each batch of trees (the checkpoint), so ``n_trees`` counts only complete trees.
"""
import json
import os
import shutil
import zipfile

import numpy as np

from ..version import __version__
from ..errors import InputError
from ..federation.files import atomic_write

FORMAT = "fedforest-vertical"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"


def party_dir(model_dir, rank):
    return os.path.join(model_dir, "master" if rank == 0 else f"party-{rank}")


def write_manifest(folder, manifest):
    data = json.dumps(dict(manifest, format=FORMAT, format_version=FORMAT_VERSION,
                           fedforest_version=__version__), indent=2, sort_keys=True).encode()
    atomic_write(os.path.join(folder, MANIFEST), lambda fh: fh.write(data))


def write_tree(folder, index, arrays):
    path = os.path.join(folder, "trees", f"tree-{index:05d}.npz")
    atomic_write(path, lambda fh: np.savez(fh, **arrays))


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


def read_trees(folder, n_trees, what="model"):
    trees = []
    for i in range(n_trees):
        path = os.path.join(folder, "trees", f"tree-{i:05d}.npz")
        try:
            with np.load(path, allow_pickle=False) as z:
                trees.append({k: z[k] for k in z.files})
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            raise InputError(what, f"cannot read tree file {path!r}: {exc or type(exc).__name__}") from None
    return trees


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


class CheckpointWriter:
    """Writes finished trees and the manifest from a background thread, so disk
    syncs overlap the growth of the next tree.  Writes stay in order; an error
    in the writer is raised by the next :meth:`submit` or by :meth:`close`."""

    def __init__(self, folder):
        import queue
        import threading
        self.folder = folder
        self._queue = queue.Queue()
        self._error = None
        self._thread = threading.Thread(target=self._run, name="fedforest-checkpoint", daemon=True)
        self._thread.start()

    def _run(self):
        while True:
            item = self._queue.get()
            if item is None:
                return
            if self._error is not None:
                continue
            index, arrays, manifest = item
            try:
                write_tree(self.folder, index, arrays)
                write_manifest(self.folder, manifest)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                self._error = exc

    def _raise(self):
        if self._error is not None:
            raise self._error

    def submit(self, index, arrays, manifest):
        self._raise()
        self._queue.put((index, arrays, manifest))

    def close(self):
        """Wait for every pending write; raise the writer's error if any."""
        self._queue.put(None)
        self._thread.join()
        self._raise()
