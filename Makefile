# One-command set-up: every target creates the virtual environment if it is missing.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.graphcap-installed

.PHONY: demo test test-all bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)          ## export the built-in example, print it, run it, compare with eager
	$(PY) -m graphcap.demo

test: $(STAMP)          ## the default test run (CI)
	$(PY) -m pytest -q

test-all: $(STAMP)      ## also the slow tests
	$(PY) -m pytest -q -m ''

bench: $(STAMP)         ## export, run_decompositions, save/load vs torch.export on the public zoo
	$(PY) bench/export_bench.py
	$(PY) bench/decomp_bench.py
	$(PY) bench/serialize_bench.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache
