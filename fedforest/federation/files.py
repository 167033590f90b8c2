"""Files every mode writes: atomic writes and run summaries."""
import json
import os
import shutil
import tempfile
from contextlib import contextmanager

import numpy as np


def atomic_write(path, write):
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=os.path.basename(path))
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        _sync_dir(folder)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_many(items, threads=8):
    """:func:`atomic_write` of several files at once (``items``: ``(path,
    write)`` pairs): every file is written to a temporary name, the files are
    synced concurrently (file systems commit concurrent syncs together), then
    renamed, and each folder is synced once.  A file is either absent or
    complete at its path; on an error no temporary file stays behind."""
    from concurrent.futures import ThreadPoolExecutor
    staged = []
    try:
        for path, write in items:
            folder = os.path.dirname(path)
            os.makedirs(folder, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=os.path.basename(path))
            staged.append((tmp, path))
            with os.fdopen(fd, "wb") as fh:
                write(fh)
        if len(staged) > 1:
            with ThreadPoolExecutor(min(threads, len(staged))) as pool:
                list(pool.map(_sync_file, [tmp for tmp, _ in staged]))
        elif staged:
            _sync_file(staged[0][0])
        while staged:
            tmp, path = staged[0]
            os.replace(tmp, path)
            staged.pop(0)
    except BaseException:
        for tmp, _ in staged:
            if os.path.exists(tmp):
                os.unlink(tmp)
        raise
    for folder in sorted({os.path.dirname(path) for path, _ in items}):
        _sync_dir(folder)


def _sync_file(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_dir(folder):
    """Make a rename durable (where the platform allows syncing a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def replaced_folder(folder):
    """Write a folder's new contents beside it, then swap: yields a staging
    folder next to ``folder``; when the block ends without an error the old
    ``folder`` (if any) gives way to the staging folder, else the staging
    folder is removed and the old one stays as it was.  A model is never half
    replaced: readers see the old folder or the new one (the swap is two
    renames; between them, which takes microseconds, ``folder`` is absent)."""
    folder = os.path.abspath(folder)
    parent, name = os.path.split(folder)
    os.makedirs(parent, exist_ok=True)
    stage = tempfile.mkdtemp(dir=parent, prefix=f".{name}.new-")
    try:
        yield stage
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    old = None
    if os.path.exists(folder):
        old = tempfile.mkdtemp(dir=parent, prefix=f".{name}.old-")
        os.rmdir(old)
        os.replace(folder, old)
    os.replace(stage, folder)
    _sync_dir(parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def write_summary(path, summary):
    """A run summary as JSON (arrays left out) at ``path``; nothing when ``path`` is empty."""
    if not path:
        return
    doc = {k: v for k, v in summary.items() if not isinstance(v, np.ndarray)}
    data = json.dumps(doc, indent=2, sort_keys=True, default=str).encode()
    atomic_write(os.path.abspath(path), lambda fh: fh.write(data))
