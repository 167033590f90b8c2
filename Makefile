# fedforest: `make demo` (main job on the bundled dataset), `make test`, `make bench`.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
MPIEXEC = $(VENV)/bin/mpiexec
DEMO    = build/demo

.PHONY: venv demo test bench experiments clean slurm-check

# the demo's set-up installs what a job needs; tests, benchmarks and experiments add their extras
$(VENV)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	$(PY) -m fedforest warm-up
	touch $@

$(VENV)/.test-installed: $(VENV)/.installed
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

venv: $(VENV)/.installed

demo: venv
	$(PY) -m fedforest demo-data --out $(DEMO)
	$(MPIEXEC) -n 3 $(PY) -m fedforest train --config $(DEMO)/job.toml --overwrite
	$(MPIEXEC) -n 3 $(PY) -m fedforest predict --config $(DEMO)/job.toml \
		--data $(DEMO)/test-party1.csv $(DEMO)/test-party2.csv
	$(PY) -m fedforest demo-report --dir $(DEMO)

test: $(VENV)/.test-installed
	$(PY) -m pytest -q

bench: $(VENV)/.test-installed
	$(PY) experiments/bench_startup.py
	$(PY) experiments/bench_vertical.py
	$(PY) experiments/bench_paillier.py --dense-rows 100000
	$(PY) experiments/bench_vertical_boost.py
	$(PY) experiments/bench_leakage.py
	$(PY) experiments/bench_sealing.py
	$(PY) experiments/bench_fedxgbllr.py
	$(PY) experiments/bench_efdt.py
	$(PY) experiments/bench_fedga.py
	$(PY) experiments/bench_memory.py

experiments: $(VENV)/.test-installed
	$(PY) experiments/lossless_vs_sklearn.py
	$(PY) experiments/vertical_boost_vs_xgboost.py
	$(PY) experiments/icdta4fl_tables.py
	$(PY) experiments/icdta4fl_cart.py
	$(PY) experiments/scaling_vertical.py
	$(PY) experiments/scaling_vertical.py --sweeps none --big --out experiments/results/scaling_vertical_big
	$(PY) experiments/plots.py

# opt-in: a throw-away one-node Slurm cluster runs launch/fedforest.sbatch (root, slurm-wlm, munge)
slurm-check: venv
	launch/slurm-check.sh

clean:
	rm -rf build .pytest_cache
