"""Status lines of a job: through :mod:`logging` (logger ``"fedforest"``).

The command line prefixes each line with the rank that wrote it
(:func:`configure`); parties are quiet by default, so a job's output is the
master's.  Lines go through ``tqdm.write``, so they never break a progress bar
that is being drawn.  Used as a library, fedforest prints nothing unless the
caller's logging configuration asks for ``fedforest`` INFO lines, or a job is
run with ``quiet=False`` (a plain handler is then added once).
"""
import logging
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
