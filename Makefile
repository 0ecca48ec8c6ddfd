# One-command set-up: every target creates the virtual environment if it is missing.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.graphcap-installed

.PHONY: demo test test-all bench compat compat-check compat-reference clean

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

compat: $(STAMP)        ## PyTorch's own export tests with graphcap: figures and failures by cause
	$(PY) compat/compat.py

compat-check: $(STAMP)  ## the same, as CI's ratchet against compat/known_differences.txt
	$(PY) compat/compat.py --check

compat-reference: $(STAMP)  ## rerun the suite with torch.export itself: rewrites compat/torch_passes.txt
	$(PY) compat/compat.py --reference

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache
