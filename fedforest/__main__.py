"""``python -m fedforest`` and the ``fedforest`` command."""
import sys


def run(argv=None):
    """The command line; ``--version`` is answered before its imports (numpy, the modes)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv == ["--version"]:
        from .version import __version__
        print(f"fedforest {__version__}")
        return 0
    try:
        from .cli import main
        return main(argv)
    except KeyboardInterrupt:       # Ctrl-C while the command line loads: one line, not a traceback
        from .errors import Stopped
        from .transport.watch import launcher_rank_size
        found = launcher_rank_size()
        stop = Stopped("SIGINT (Ctrl-C)")
        stop.say(found[0] if found else 0)
        return stop.exit_code


if __name__ == "__main__":
    sys.exit(run())
