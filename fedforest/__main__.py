"""``python -m fedforest`` and the ``fedforest`` command."""
import sys


def run(argv=None):
    """The command line; ``--version`` is answered before its imports (numpy, the modes)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv == ["--version"]:
        from .version import __version__
        print(f"fedforest {__version__}")
        return 0
    from .cli import main
    return main(argv)


if __name__ == "__main__":
    sys.exit(run())
