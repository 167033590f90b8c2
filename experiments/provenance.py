"""Where a result came from: the commit it was made from, the machine and the versions.

Every experiment and benchmark calls :func:`add_arguments` on its parser and
:func:`record` before it writes a result.  A result made from code that differs
from the commit it names cannot be reproduced, so :func:`record` refuses to
run when ``fedforest/`` or ``experiments/`` has uncommitted changes, unless
``--allow-dirty`` is given (the result then says so).
"""
import datetime as dt
import os
import platform
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WATCHED = ("fedforest", "experiments/*.py")


def add_arguments(parser):
    parser.add_argument("--allow-dirty", action="store_true",
                        help="write results even when fedforest/ or experiments/ has uncommitted changes "
                             "(the result records it)")
    return parser


def start(doc, argv=None):
    """For a script without options of its own: ``--help`` shows ``doc``,
    ``--allow-dirty`` is accepted; returns :func:`record`'s provenance."""
    import argparse
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(ap)
    return record(ap.parse_args(argv))


def git_state():
    """``(commit, dirty)``: the checked-out commit and whether the code differs from it
    (None, None outside a git checkout).  A copy of a checkout without its git folder
    (a tree sent to a cluster node) takes the commit from ``FEDFOREST_GIT_COMMIT``
    when set, with ``dirty`` unknown (None)."""
    copied = os.environ.get("FEDFOREST_GIT_COMMIT")
    if copied and not os.path.exists(os.path.join(ROOT, ".git")):
        return copied, None
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", *WATCHED], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None, None
    return commit, bool(dirty)


def cpu_name():
    """The processor's model name (None where /proc/cpuinfo is not readable)."""
    try:
        with open("/proc/cpuinfo") as fh:
            return next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), None)
    except OSError:
        return None


def write_result(path, doc):
    """A benchmark's JSON result (sorted keys, folder created)."""
    import json
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        json.dump(doc, fh, indent=2, sort_keys=True)
    return path


def write_result_and_table(path, doc, md):
    """:func:`write_result`, and the markdown ``md`` beside it (``.md``), printed."""
    write_result(path, doc)
    with open(os.path.splitext(path)[0] + ".md", "w") as fh:
        fh.write(md)
    print(md)
    print(f"written {path}")
    return path


def versions():
    import numpy
    import pandas
    import sklearn
    import fedforest
    out = {"python": platform.python_version(), "fedforest": fedforest.__version__, "numpy": numpy.__version__,
           "pandas": pandas.__version__, "scikit-learn": sklearn.__version__}
    for name in ("numba", "xgboost", "river", "mpi4py"):
        try:
            out[name] = __import__(name).__version__
        except ImportError:
            pass
    return out


def record(args=None):
    """The provenance of a result (a dict for its JSON).  Exits with a message
    when the code has uncommitted changes and ``args.allow_dirty`` is not set."""
    commit, dirty = git_state()
    allow = bool(getattr(args, "allow_dirty", False))
    if dirty and not allow:
        sys.exit("refusing to write results: fedforest/ or experiments/ has uncommitted changes, so the "
                 f"result could not be reproduced from commit {commit[:12]}. Commit first, or pass "
                 "--allow-dirty.")
    return {"git_commit": commit, "fedforest_uncommitted_changes": dirty,
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(["python"] + [os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:]),
            "cores": os.cpu_count(), "cpu": cpu_name(), "platform": platform.platform(), "versions": versions()}
