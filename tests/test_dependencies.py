"""What ``pip install fedforest`` installs is what the package imports.

Every module under ``fedforest/`` is parsed with ``ast`` (nothing is imported)
and each import of a third-party package, at module level or inside a function,
is checked against ``setup.cfg``:

* a plain ``import x`` / ``from x import y`` needs a distribution that provides
  ``x`` in ``install_requires`` (a job, ``predict``, ``explain``, ``evaluate``,
  ``split`` and the demo must run after ``pip install fedforest``);
* an optional package is imported only through
  ``fedforest.optional.require("x", extra="e", ...)``, which fails with one line
  naming ``pip install 'fedforest[e]'``; ``e`` must be an extra of ``setup.cfg``
  that installs ``x``.

Import names are mapped to distributions with
``importlib.metadata.packages_distributions()`` (``sklearn`` is provided by
``scikit-learn``); a package that is not installed here counts as the
distribution of its own name (``tomli`` on Python >= 3.11).
"""
import ast
import configparser
import os
import re
import sys
from importlib import metadata

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "fedforest")
SETUP_CFG = os.path.join(ROOT, "setup.cfg")


def canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(text):
    """The canonical distribution names of a setup.cfg requirement list."""
    names = set()
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.add(canonical(re.match(r"[A-Za-z0-9._-]+", line).group(0)))
    return names


def declared(setup_text):
    """(install_requires, {extra: distributions}) of a setup.cfg's text."""
    cfg = configparser.ConfigParser()
    cfg.read_string(setup_text)
    extras = cfg["options.extras_require"] if cfg.has_section("options.extras_require") else {}
    return (requirement_names(cfg.get("options", "install_requires", fallback="")),
            {name: requirement_names(extras[name]) for name in extras})


def imports(source, path):
    """(line, top-level module, extra or None) of every third-party import in
    ``source``; ``extra`` is set for ``require(...)`` calls.  ``require`` with
    arguments that are not literal texts yields the extra ``"?"``."""
    found = []
    for node in ast.walk(ast.parse(source, path)):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Call) and (getattr(node.func, "id", None) == "require"
                                             or getattr(node.func, "attr", None) == "require"):
            extra = next((k.value for k in node.keywords if k.arg == "extra"), None)
            module = node.args[0] if node.args else None
            if not (isinstance(module, ast.Constant) and isinstance(module.value, str)):
                found.append((node.lineno, "?", "?"))
                continue
            names = [module.value]
            top = module.value.split(".")[0]
            found.append((node.lineno, top, getattr(extra, "value", extra) if isinstance(extra, ast.Constant)
                          else "?"))
            continue
        for name in names:
            top = name.split(".")[0]
            if top not in sys.stdlib_module_names and top != "fedforest":
                found.append((node.lineno, top, None))
    return found


def distributions(module, provided):
    """The canonical names of the distributions that provide ``module``."""
    return {canonical(d) for d in provided.get(module, [])} | {canonical(module)}


def problems(package_dir, setup_text, provided=None):
    """Every third-party import under ``package_dir`` that ``setup_text`` does not cover."""
    required, extras = declared(setup_text)
    provided = metadata.packages_distributions() if provided is None else provided
    found = []
    for folder, _, files in os.walk(package_dir):
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            where = os.path.relpath(path, os.path.dirname(package_dir))
            with open(path, encoding="utf-8") as fh:
                source = fh.read()
            for line, module, extra in imports(source, path):
                dists = distributions(module, provided)
                if extra is None:
                    if not dists & required:
                        found.append(f"{where}:{line}: imports {module!r} ({', '.join(sorted(dists))}), which is "
                                     "not in install_requires: declare it there, or import it with "
                                     "fedforest.optional.require and an extra")
                elif extra not in extras:
                    found.append(f"{where}:{line}: require({module!r}) names the extra {extra!r}, which setup.cfg "
                                 f"does not declare (extras: {', '.join(sorted(extras))})")
                elif not dists & extras[extra]:
                    found.append(f"{where}:{line}: require({module!r}) names the extra {extra!r}, which does not "
                                 f"install it ({', '.join(sorted(extras[extra]))})")
    return found


def _setup_text():
    with open(SETUP_CFG, encoding="utf-8") as fh:
        return fh.read()


def test_every_third_party_import_is_declared_or_optional():
    found = problems(PACKAGE, _setup_text())
    assert not found, "\n".join(found)


def test_the_check_finds_a_runtime_dependency_left_in_an_extra():
    """As setup.cfg was when `make demo` failed on a fresh machine: pyarrow only in extras."""
    text = _setup_text()
    kept = [line for line in text.split("[options.extras_require]")[0].splitlines()
            if not line.strip().startswith("pyarrow")]
    text = "\n".join(kept) + "\n[options.extras_require]" + text.split("[options.extras_require]")[1]
    assert "pyarrow" in declared(text)[1]["parquet"] and "pyarrow" not in declared(text)[0]
    found = problems(PACKAGE, text)
    assert any(p.startswith(os.path.join("fedforest", "data", "columns.py")) and "'pyarrow'" in p for p in found), \
        found
    assert all("'pyarrow'" in p for p in found), found


@pytest.mark.parametrize("source, expected", [
    ("import xgboost as xgb\n", "imports 'xgboost'"),
    ("def f():\n    from xgboost import core\n", "imports 'xgboost'"),
    ("from fedforest.optional import require\nxgb = require('xgboost', extra='xgboost', what='m', feature='f')\n",
     None),
    ("from fedforest import optional\nxgb = optional.require('xgboost', extra='test', what='m', feature='f')\n",
     None),
    ("xgb = require('xgboost', extra='parquet', what='m', feature='f')\n", "which does not install it"),
    ("xgb = require('xgboost', extra='gpu', what='m', feature='f')\n", "which setup.cfg does not declare"),
    ("xgb = require(NAME, extra='xgboost', what='m', feature='f')\n", "names the extra '?'"),
    ("import numpy, json\nfrom sklearn.tree import DecisionTreeClassifier\n", None),
    ("import yaml\n", "imports 'yaml' (pyyaml, yaml)"),
])
def test_the_check_on_hand_made_modules(tmp_path, source, expected):
    package = tmp_path / "fedforest"
    package.mkdir()
    (package / "mod.py").write_text(source)
    provided = {"xgboost": ["xgboost-cpu"], "numpy": ["numpy"], "sklearn": ["scikit-learn"], "yaml": ["PyYAML"]}
    found = problems(str(package), _setup_text(), provided)
    if expected is None:
        assert found == []
    else:
        assert len(found) == 1 and expected in found[0] and found[0].startswith(os.path.join("fedforest", "mod.py")), \
            found


def test_require_names_the_extra_in_one_line():
    from fedforest.errors import InputError
    from fedforest.optional import MissingExtra, require
    with pytest.raises(MissingExtra) as info:
        require("fedforest_no_such_package", extra="xgboost", what="mode", feature="mode 'x'")
    assert isinstance(info.value, InputError) and "\n" not in str(info.value)
    assert str(info.value) == ("mode: mode 'x' needs the Python package 'fedforest_no_such_package', which is not "
                               "installed: pip install 'fedforest[xgboost]'")
    assert require("json", extra="xgboost", what="mode", feature="mode 'x'") is sys.modules["json"]


def test_a_missing_dependency_of_an_optional_package_is_named(monkeypatch, tmp_path):
    from fedforest.optional import MissingExtra, require
    (tmp_path / "fedforest_fake_extra.py").write_text("import fedforest_fake_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(MissingExtra, match=r"mode 'x' needs the Python package 'fedforest_fake_extra', which "
                                           r"cannot be imported \('fedforest_fake_dependency' is missing\): "
                                           r"pip install 'fedforest\[xgboost\]'"):
        require("fedforest_fake_extra", extra="xgboost", what="mode", feature="mode 'x'")


def test_every_mode_names_an_extra_that_setup_cfg_declares():
    from fedforest.federation.registry import REGISTRY
    extras = declared(_setup_text())[1]
    named = {m.name: m.extra for m in REGISTRY.modes() if m.extra}
    assert named and all(e in extras for e in named.values()), (named, sorted(extras))



def _recipe(makefile, target):
    """(prerequisites, commands) of a Makefile target."""
    lines = makefile.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(target + ":"):
            commands = []
            for command in lines[i + 1:]:
                if not command.startswith("\t"):
                    break
                commands.append(command.strip())
            return line.split(":", 1)[1].split(), commands
    raise AssertionError(f"the Makefile has no target {target}")


def test_ci_runs_the_demo_with_only_the_runtime_dependencies_before_the_tests():
    """`.ci/run` runs the user's path first: `make demo` in a virtual environment
    that `make venv` fills with install_requires only, then `make test`."""
    with open(os.path.join(ROOT, ".ci", "run")) as fh:
        ci = [line.strip() for line in fh if line.strip() and not line.lstrip().startswith("#")]
    assert [line.split()[1] for line in ci if line.startswith("make ")] == ["demo", "test"], ci
    with open(os.path.join(ROOT, "Makefile")) as fh:
        makefile = fh.read()
    assert _recipe(makefile, "demo")[0] == ["venv"] and _recipe(makefile, "venv")[0] == ["$(VENV)/.installed"]
    installs = [c for c in _recipe(makefile, "$(VENV)/.installed")[1] if "pip install" in c]
    assert installs[-1].endswith("pip install --quiet -e .") and not any("[" in c for c in installs), installs
