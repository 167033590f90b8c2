"""Packages only some features need: the extras of ``setup.cfg``.

Every third-party package a job, ``predict``, ``explain``, ``evaluate``,
``split`` or the demo imports is in ``install_requires``.  A feature that needs
a package beyond those imports it with :func:`require`, which names the pip
extra that installs it in one line instead of a traceback::

    xgb = require("xgboost", extra="xgboost", what="mode", feature="mode 'fedxgbllr'")

``tests/test_dependencies.py`` checks that every third-party import under
``fedforest/`` is either declared in ``install_requires`` or made through
:func:`require` with an extra that ``setup.cfg`` declares and that installs it.
"""
import importlib

from .errors import InputError


class MissingExtra(InputError):
    """An optional package is not installed; the one-line message names the extra."""

    def __init__(self, what, feature, module, extra, missing=None):
        self.module, self.extra = module, extra
        how = f"pip install 'fedforest[{extra}]'"
        if missing and missing.split(".")[0] != module.split(".")[0]:
            problem = (f"{feature} needs the Python package {module!r}, which cannot be imported "
                       f"({missing!r} is missing): {how}")
        else:
            problem = f"{feature} needs the Python package {module!r}, which is not installed: {how}"
        super().__init__(what, problem)


def require(module, *, extra, what, feature):
    """Import and return ``module``, a package of the pip extra ``extra``,
    for ``feature`` (e.g. ``"mode 'fedxgbllr'"``; ``what`` is the
    :class:`InputError`'s subject); raises :class:`MissingExtra` when it is
    not installed."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise MissingExtra(what, feature, module, extra, exc.name) from None
