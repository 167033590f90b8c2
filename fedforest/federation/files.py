"""Files every mode writes: atomic writes and run summaries."""
import json
import os
import tempfile

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


def write_summary(path, summary):
    """A run summary as JSON (arrays left out) at ``path``; nothing when ``path`` is empty."""
    if not path:
        return
    doc = {k: v for k, v in summary.items() if not isinstance(v, np.ndarray)}
    data = json.dumps(doc, indent=2, sort_keys=True, default=str).encode()
    atomic_write(os.path.abspath(path), lambda fh: fh.write(data))
