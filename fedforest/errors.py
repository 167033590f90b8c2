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
    """A signal ended the rank: SIGTERM (a scheduler's time limit, ``scancel``;
    raised in the main thread by the command line's handler) or SIGINT
    (Ctrl-C, which Python raises as ``KeyboardInterrupt``).  Not an error of
    the job: every file already written stays, and a training job's last
    complete checkpoint is what ``--resume`` continues."""

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
        return cls("SIGINT (Ctrl-C)") if isinstance(exc, KeyboardInterrupt) else None

    kept = None   # the master's training: what its last complete checkpoint holds ("750 of 1000 trees in ...")

    def line(self, rank):
        """The one line a stopped rank prints."""
        if self.kept:
            return (f"rank {rank}: stopped by {self.name}. The last complete checkpoint holds {self.kept}: "
                    "run the job again with --resume to continue from it.")
        return (f"rank {rank}: stopped by {self.name}. A training job's model folder keeps its last complete "
                "checkpoint: run it again with --resume to continue.")

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
