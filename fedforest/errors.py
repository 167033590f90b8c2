"""Exception types.  Every bad input is an :class:`InputError` whose message reads
``"<what>: <problem>"`` so users see one format everywhere."""


class FedForestError(Exception):
    """Base class of every error raised by fedforest."""


class InputError(FedForestError, ValueError):
    """A bad parameter, configuration, data file or model file."""

    def __init__(self, what, problem):
        self.what = what
        self.problem = problem
        super().__init__(f"{what}: {problem}")


class ChannelError(FedForestError):
    """A message failed authentication: tampered, replayed, reordered or truncated."""

    def __init__(self, sender, receiver, detail):
        self.sender = sender
        self.receiver = receiver
        super().__init__(
            f"message from rank {sender} to rank {receiver} failed authentication "
            f"({detail}); the channel may have been tampered with, the job stops")


class RemoteError(FedForestError):
    """An exception raised on another rank, carried to the master."""

    def __init__(self, rank, exc_type, message, traceback_text):
        self.rank = rank
        self.exc_type = exc_type
        self.remote_message = message
        self.remote_traceback = traceback_text
        super().__init__(f"rank {rank} failed with {exc_type}: {message}\n"
                         f"--- traceback on rank {rank} ---\n{traceback_text}")


class Stopped(BaseException):
    """A signal ended the rank: SIGTERM (a scheduler's time limit, ``scancel``)
    or SIGINT (Ctrl-C), raised in the main thread by the command line's
    handlers (elsewhere Python raises Ctrl-C as ``KeyboardInterrupt``, which
    :meth:`of` takes for this).  Not an error of the job: every file already
    written stays, and a training job's last complete checkpoint is what
    ``--resume`` continues."""

    CODES = {"SIGTERM": 143, "SIGINT (Ctrl-C)": 130}

    def __init__(self, name="SIGTERM"):
        self.name = name
        super().__init__(f"stopped by {name}")

    @property
    def exit_code(self):
        return self.CODES.get(self.name, 1)

    @classmethod
    def of(cls, exc):
        """The :class:`Stopped` of a signal's exception (KeyboardInterrupt: SIGINT), else None."""
        if isinstance(exc, cls):
            return exc
        if Stopped.requested is not None and not isinstance(exc, (SystemExit, GeneratorExit)):
            return Stopped.requested
        return cls("SIGINT (Ctrl-C)") if isinstance(exc, KeyboardInterrupt) else None

    #: the master's training: what its last complete checkpoint holds ("750 of 1000 trees in ..."),
    #: :data:`NOTHING_SAVED` when no checkpoint of this run exists, None where the rank does not know
    kept = None
    #: the Stopped of the signal this process received (set by the command line's handlers):
    #: whatever fails after it is that stop (an interrupted library call may fail its own way)
    requested = None

    @classmethod
    def request(cls, name):
        """A signal arrived: the :class:`Stopped` to raise, remembered as :attr:`requested`."""
        if Stopped.requested is None:
            Stopped.requested = cls(name)
        return Stopped.requested

    def line(self, rank):
        """The one line a stopped rank (None: a process whose rank is not known yet) prints."""
        note = checkpoint_note(self.kept)
        return ("" if rank is None else f"rank {rank}: ") + f"stopped by {self.name}." + (f" {note}" if note else "")

    def say(self, rank):
        """Print :meth:`line` to standard error in one write, so that the lines
        of ranks stopped at the same moment do not interleave."""
        import os
        import sys
        sys.stderr.flush()
        try:
            os.write(2, (self.line(rank) + "\n").encode("utf-8"))
        except OSError:
            pass


NOTHING_SAVED = ""   # Stopped.kept: the job stopped before its first checkpoint


def training_stop(exc):
    """What a training master's failure ``exc`` says about a stop: the
    :class:`Stopped` of a signal, or the :class:`RemoteError` of a party a
    signal stopped, with :attr:`Stopped.kept` set to :data:`NOTHING_SAVED`
    where no checkpoint accounts for it (the training loop says what its
    checkpoint holds; before it nothing of the run is saved); ``exc`` itself
    when it is no stop."""
    stop = Stopped.of(exc)
    if stop is None and isinstance(exc, RemoteError) and exc.exc_type == "Stopped":
        stop = exc
    if stop is None:
        return exc
    if getattr(stop, "kept", None) is None:
        stop.kept = NOTHING_SAVED
    return stop


def checkpoint_note(kept):
    """What a stopped training job's checkpoint allows (``kept``: see
    :attr:`Stopped.kept`): --resume only where a checkpoint exists."""
    if kept is None:
        return ""
    if kept == NOTHING_SAVED:
        return "Nothing was saved: the job stopped before its first checkpoint; run the same command again."
    return f"The last complete checkpoint holds {kept}: run the job again with --resume to continue from it."
