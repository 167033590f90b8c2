"""The paths a command writes, checked before any work.

A command's outputs (the model folder of a training job; the predictions
file; the run summary; ``evaluate --json``; the files of ``split``) may not
name a file the command reads: a data or test file, the job file, or a file
of the model it reads.  Each output must also be writable where it is: an
existing folder where a file goes (or a file where a folder goes), a path
through a file, a folder without write permission are refused with the
setting that names them, before any data is read and with nothing written.
"""
import os

from ..errors import InputError
from .mode import HORIZONTAL

#: what a model folder holds: the role folders of vertical (``master``, ``party-<k>``)
#: and horizontal (``server``, ``client-<k>``) jobs, and one role's files
MODEL_ENTRIES = ("master", "server", "manifest.json", "model.json", "rules.npz", "trees")
MODEL_PREFIXES = ("party-", "client-")


def _same(a, b):
    """Whether paths ``a`` and ``b`` name one file (links followed)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def _inside(path, folder):
    real, top = os.path.realpath(path), os.path.realpath(folder)
    return real != top and os.path.commonpath([real, top]) == top


def is_model_file(path, model_dir):
    """Whether ``path`` is an existing file of the model in ``model_dir``."""
    if not (model_dir and os.path.isfile(path) and _inside(path, model_dir)):
        return False
    first = os.path.relpath(os.path.realpath(path), os.path.realpath(model_dir)).split(os.sep)[0]
    return first in MODEL_ENTRIES or (first.startswith(MODEL_PREFIXES) and first.split("-", 1)[1].isdigit())


def _creatable(key, path):
    """``path`` (absent) can be made: its nearest existing folder is a writable folder."""
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise InputError(key, f"{path!r} cannot be created: {parent!r} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(key, f"{path!r} cannot be created: the folder {parent!r} is not writable")


def _refuse_input(key, path, inputs, kind):
    for what, source in inputs:
        if _same(path, source):
            raise InputError(key, f"{path!r} is {what}, which this command reads: writing the {kind} "
                                  "there would replace it; name another path")


def check_output_file(key, path, inputs=(), model_dir=None, outputs=()):
    """``path`` (a file the command writes, named by setting ``key``) is none
    of ``inputs`` (``(what, path)`` pairs), no file of the model in
    ``model_dir``, none of the command's other ``outputs`` (pairs too), not a
    folder, and can be written."""
    if not path:
        return
    _refuse_input(key, path, inputs, "file")
    for what, other in outputs:
        if other and _same(path, other):
            raise InputError(key, f"{path!r} is also {what}: one file cannot hold both; name another path")
    if is_model_file(path, model_dir):
        raise InputError(key, f"{path!r} is a file of the model in {model_dir!r}, which this command "
                              "reads: name another path")
    if os.path.isdir(path):
        raise InputError(key, f"{path!r} is a folder: name a file")
    if os.path.lexists(path):
        folder = os.path.dirname(os.path.abspath(path))
        if not os.access(folder, os.W_OK | os.X_OK):
            raise InputError(key, f"{path!r} cannot be replaced: the folder {folder!r} is not writable")
    else:
        _creatable(key, path)


def check_output_folder(key, path, inputs=()):
    """``path`` (a folder the command writes into, named by setting ``key``)
    is a writable folder, or can be made."""
    _refuse_input(key, path, inputs, "folder")
    if os.path.isdir(path):
        if not os.access(path, os.W_OK | os.X_OK):
            raise InputError(key, f"the folder {path!r} is not writable")
    elif os.path.lexists(path):
        raise InputError(key, f"{path!r} is a file, not a folder: name a folder (it is made where absent)")
    else:
        _creatable(key, path)


def job_inputs(cfg, config=None):
    """``(what, path)`` of every file a job reads besides its model: each
    party's (client's) data and test file and the job file."""
    who = "client" if cfg.spec.family == HORIZONTAL else "party"
    out = [("the job file", config)] if config else []
    for key, label in (("data", "data file"), ("test_data", "test file")):
        paths = cfg.values.get(key)
        if isinstance(paths, (list, tuple)):
            # a table given as a DataFrame is read, not a path; "<data of party p2>" stands
            # in a network job for another participant's file, which this machine never reads
            out += [(f"the {label} of {who} {k}", p) for k, p in enumerate(paths, start=1)
                    if isinstance(p, str) and p and not p.startswith("<")]
    return out


def check_job_paths(cfg, command, config=None):
    """Before a ``command`` ("train" or "predict") job reads anything: its
    outputs name no file it reads and can be written (see the module text)."""
    inputs = job_inputs(cfg, config)
    if command == "train":
        check_output_folder("model_dir", cfg.model_dir, inputs)
        check_output_file("summary_json", cfg.summary_json, inputs, cfg.model_dir)
        return
    output, summary = cfg.values.get("output"), cfg.values.get("summary_json")
    check_output_file("output", output, inputs, cfg.model_dir)
    check_output_file("summary_json", summary, inputs, cfg.model_dir, [("the predictions file (output)", output)])
