"""Status lines of a job: through :mod:`logging` (logger ``"fedforest"``).

The command line prefixes each line with the rank that wrote it
(:func:`configure`); parties are quiet by default, so a job's output is the
master's.  Lines go through ``tqdm.write``, so they never break a progress bar
that is being drawn.  Used as a library, fedforest prints nothing unless the
caller's logging configuration asks for ``fedforest`` INFO lines, or a job is
run with ``quiet=False`` (a plain handler is then added once).
"""
import logging
import os
import sys

LOGGER = logging.getLogger("fedforest")


class _TqdmHandler(logging.StreamHandler):
    """Writes a record with ``tqdm.write`` (a line above any live progress bar)."""

    def emit(self, record):
        try:
            from tqdm import tqdm
            tqdm.write(self.format(record), file=self.stream)
            self.flush()
        except Exception:  # noqa: BLE001 - logging must never raise
            self.handleError(record)


def configure(rank=None, stream=None):
    """Send fedforest's status lines to ``stream`` (stdout), prefixed with
    ``[rank N]`` when ``rank`` is given.  Replaces an earlier configuration."""
    for h in list(LOGGER.handlers):
        LOGGER.removeHandler(h)
    handler = _TqdmHandler(stream or sys.stdout)
    prefix = "" if rank is None else f"[rank {rank}] "
    handler.setFormatter(logging.Formatter(prefix + "%(message)s"))
    LOGGER.addHandler(handler)
    LOGGER.setLevel(logging.INFO)
    LOGGER.propagate = False
    return handler


def status(cfg, text):
    """One status line (nothing when ``cfg.quiet``)."""
    if cfg.quiet:
        return
    if not LOGGER.handlers and not logging.getLogger().handlers:
        configure()
    LOGGER.info(text)


# -- progress of a job's master ---------------------------------------------------
PROGRESS_ENV = "FEDFOREST_PROGRESS"
LINE_INTERVAL = 30.0        # seconds between progress lines written to a log
_LAUNCHERS = ("mpiexec", "mpirun", "orterun", "prterun")
_style = {"lines": False}


def _parent_of(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def launcher_terminal(max_depth=5):
    """Whether the ``mpiexec`` that started this rank on this machine writes
    to a terminal (a rank itself only sees the pipe the launcher reads).
    False where that cannot be told (another machine, no ``/proc``)."""
    pid = os.getppid()
    for _ in range(max_depth):
        if not pid or pid <= 1:
            return False
        try:
            with open(f"/proc/{pid}/comm") as fh:
                name = fh.read().strip()
        except OSError:
            return False
        if name.startswith(_LAUNCHERS):
            try:
                target = os.readlink(f"/proc/{pid}/fd/2")
            except OSError:
                return False
            return target.startswith(("/dev/pts/", "/dev/tty"))
        pid = _parent_of(pid)
    return False


def progress_choice(environ=None, stream=None, under_launcher=False):
    """Whether the master shows progress when the job leaves it open
    (``progress`` unset): ``FEDFOREST_PROGRESS`` decides when set (``1``: bars
    on a terminal, a line every 30 s in a log; ``0``: none); otherwise yes on
    a terminal: this process's, or, for a rank ``under_launcher``, the
    terminal of the ``mpiexec`` that started it on this machine."""
    env = os.environ if environ is None else environ
    stream = sys.stderr if stream is None else stream
    try:
        own = stream.isatty()
    except (AttributeError, ValueError):
        own = False
    value = env.get(PROGRESS_ENV, "").strip().lower()
    if value in ("0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        _style["lines"] = not own and not (under_launcher and launcher_terminal())
        return True
    _style["lines"] = False
    return own or (under_launcher and launcher_terminal())


class _LineStream:
    """What a progress bar draws, as whole lines (no carriage-return redraws)
    in a log file."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text):
        text = text.replace("\r", "").strip()
        if text:
            self.stream.write(text + "\n")

    def flush(self):
        self.stream.flush()


def progress_options():
    """Extra ``tqdm`` arguments for the master's progress bars: when the bar
    goes to a log (``FEDFOREST_PROGRESS=1`` without a terminal), one plain
    line every :data:`LINE_INTERVAL` seconds instead of redraws."""
    if not _style["lines"]:
        return {}
    return {"file": _LineStream(sys.stderr), "mininterval": LINE_INTERVAL, "maxinterval": LINE_INTERVAL,
            "ascii": True, "ncols": 80}
