# One-command set-up: every target creates the virtual environment if it is missing.
#
# TORCH picks one of the supported torch lines (TORCH_VERSIONS). Each line has its own
# virtual environment (.venv for the default line, .venv-<line> for the others) and its
# own constraints file, constraints/torch-<line>.txt, pinning every package CI tested
# with it: `make test TORCH=2.15` on a fresh machine installs exactly that set.
PYTHON      ?= python3
TORCH_VERSIONS := 2.10 2.11 2.12 2.13 2.14 2.15
# CI's default test run on every submission: the oldest, the default and the newest line
# (docs/torch-versions.md: their times and CI's budget). `make test-torch-versions` runs all six.
CI_TORCH_VERSIONS := 2.10 2.14 2.15
TORCH_LINES ?= $(TORCH_VERSIONS)
TORCH       ?= 2.14
CONSTRAINTS := constraints/torch-$(TORCH).txt
ifeq ($(TORCH),2.14)
VENV        ?= .venv
else
VENV        ?= .venv-$(TORCH)
endif
PY          := $(VENV)/bin/python
STAMP       := $(VENV)/.graphcap-installed

# The suite under ../shared/torch_suite is torch 2.14.1's test_export.py and
# compat/torch_passes.txt is what torch 2.14.1 passes there: the ratchet runs on that line only.
COMPAT_TORCH := 2.14

# The consumer packages (ExecuTorch, torchao, ONNX, coremltools; the 'consumers' extra) on the
# line ExecuTorch pairs a release with (executorch 1.5.1 <-> torch 2.14.1); on the other lines
# tests/e2e/test_consumers.py skips those consumers, saying so (docs/consumers.md).
CONSUMERS_TORCH := 2.14
COMMA := ,
EXTRAS := test$(if $(filter $(TORCH),$(CONSUMERS_TORCH)),$(COMMA)consumers)
# what `make lock` asks for on that line: executorch names no torch, so its pairing is pinned here
LOCK_PINS := $(if $(filter $(TORCH),$(CONSUMERS_TORCH)),'executorch==1.5.1')

ifeq ($(filter $(TORCH),$(TORCH_VERSIONS)),)
ifeq ($(filter lock clean,$(MAKECMDGOALS)),)
$(error TORCH=$(TORCH) is not a supported torch version ($(TORCH_VERSIONS)); docs/torch-versions.md: "Adding a torch release")
endif
endif

.PHONY: compat-check-ci compat-check-rerun demo consumers lint test test-all test-torch-versions test-torch-ci drop-venv bench compat compat-check compat-record compat-reference compat-torch lock clean

$(STAMP): pyproject.toml $(CONSTRAINTS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -c $(CONSTRAINTS) -e '.[$(EXTRAS)]'
	$(PY) -c "import torch, sys; v = torch.__version__; sys.exit(0 if v.startswith('$(TORCH).') else 'torch ' + v + ' in $(VENV), expected $(TORCH).x')"
	touch $(STAMP)

demo: $(STAMP)          ## export the built-in example, print it, run it, compare with eager
	$(PY) -m graphcap.demo

lint: $(STAMP)          ## ruff (rules: pyproject.toml [tool.ruff]) and mypy (strict on the public API)
	$(PY) -m ruff check .
	$(PY) -m mypy

test: $(STAMP)          ## the default test run (CI), on torch $(TORCH) (TORCH=2.15 for the other), on every core
	$(PY) -m pytest -q -n auto --dist loadfile --durations=15

# DROP_VENVS=1 removes each line's virtual environment once its tests ran: one torch
# install with its CUDA wheels takes about 6 GB, and a CI machine's disk may hold only one.
test-torch-versions:       ## the default test run on every supported torch version in turn (TORCH_LINES="2.11 2.12" for some)
	set -e; for line in $(TORCH_LINES); do \
	  $(MAKE) --no-print-directory test TORCH=$$line; \
	  if [ "$(DROP_VENVS)" = 1 ]; then $(MAKE) --no-print-directory drop-venv TORCH=$$line; fi; \
	done

test-torch-ci:             ## the default test run on CI's lines (CI_TORCH_VERSIONS), one environment at a time
	$(MAKE) --no-print-directory test-torch-versions TORCH_LINES="$(CI_TORCH_VERSIONS)"

drop-venv:
	rm -rf $(VENV)

test-all: $(STAMP)      ## also the slow tests
	$(PY) -m pytest -q -n auto --dist loadfile -m ''

bench: $(STAMP)         ## speed table (cold/warm/run_decompositions), export, save/load vs torch.export on the public zoo
	$(PY) bench/speed_bench.py
	$(PY) bench/export_bench.py
	$(PY) bench/decomp_bench.py
	$(PY) bench/serialize_bench.py

consumers: $(STAMP)     ## the consumer matrix: every public zoo model's program (graphcap's, torch.export's) to ExecuTorch, pt2e, ONNX, AOTInductor, coremltools; writes bench/CONSUMERS.md
	$(PY) bench/consumers.py

# The suite files compat runs: "listed" (test_export.py and every file with a list in
# compat/known_passes/), "all" (every file of ../shared/torch_suite, about 20 minutes), or a list
#   make compat COMPAT_FILES="test_export.py test_verifier.py"
COMPAT_FILES ?= listed
# pytest-xdist processes per suite file ("auto": one per core; 0: one process, in the file's order)
COMPAT_WORKERS ?= 0
# CI's ratchet: test_export.py and the small files (a few minutes), then the three files that re-run
# test_export.py's tests through save/load, a re-export and decompositions (about 600 tests each),
# each spread over every core. opinfo is held by `make compat-check` only (docs/torch-suite.md).
CI_COMPAT_FILES := test_export.py test_unflatten.py test_swap.py test_hop.py test_verifier.py \
	test_draft_export.py test_dynamic_spec_export.py test_lift_unlift.py test_dynamic_shapes.py
CI_RERUN_FILES := test_serdes.py test_export_training_ir_to_run_decomp.py test_retraceability.py

compat: compat-torch $(STAMP)        ## PyTorch's own export tests with graphcap: figures and failures by cause, per file
	$(PY) compat/compat.py --files "$(COMPAT_FILES)" --workers $(COMPAT_WORKERS)

compat-check: compat-torch $(STAMP)  ## the same, as CI's ratchet (compat/known_differences.txt, compat/known_passes/)
	$(PY) compat/compat.py --check --files "$(COMPAT_FILES)" --workers $(COMPAT_WORKERS)

compat-check-ci:                     ## compat-check on CI's files (CI_COMPAT_FILES)
	$(MAKE) --no-print-directory compat-check COMPAT_FILES="$(CI_COMPAT_FILES)"

compat-check-rerun:                  ## compat-check on the three re-run files (CI_RERUN_FILES), over every core
	$(MAKE) --no-print-directory compat-check COMPAT_FILES="$(CI_RERUN_FILES)" COMPAT_WORKERS=auto

compat-record: compat-torch $(STAMP)  ## run the suite and add graphcap's new passes to compat/known_passes/
	$(PY) compat/compat.py --record --files "$(COMPAT_FILES)" --workers $(COMPAT_WORKERS)

compat-reference: compat-torch $(STAMP)  ## rerun the suite with torch.export itself: rewrites compat/torch_passes*
	$(PY) compat/compat.py --reference --files "$(COMPAT_FILES)" --workers $(COMPAT_WORKERS)

compat-torch:
	@test "$(TORCH)" = "$(COMPAT_TORCH)" || { echo "make compat runs on torch $(COMPAT_TORCH) only: the suite and compat/torch_passes.txt are torch 2.14.1's (docs/torch-versions.md)"; exit 2; }

# A new torch release: resolve pyproject.toml afresh with the given torch and torchvision in
# $(VENV) (made anew) and freeze the result into constraints/torch-$(TORCH).txt.
#   make lock TORCH=2.16 TORCH_PIN=2.16.0 VISION_PIN=0.30.0
lock:
	@test -n "$(TORCH_PIN)" -a -n "$(VISION_PIN)" || { echo "usage: make lock TORCH=<line> TORCH_PIN=<torch version> VISION_PIN=<torchvision version>"; exit 2; }
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet 'torch==$(TORCH_PIN)' 'torchvision==$(VISION_PIN)' $(LOCK_PINS) -e '.[$(EXTRAS)]'
	mkdir -p constraints
	{ echo "# torch $(TORCH_PIN) line: the exact set CI tests graphcap against (every package the"; \
	  echo "# set-up installs, torch's CUDA wheels included; PyPI's Linux torch is the CUDA"; \
	  echo "# build and runs on CPU-only machines). \`make TORCH=$(TORCH) ...\` installs with"; \
	  echo "# \`pip install -c constraints/torch-$(TORCH).txt -e '.[$(EXTRAS)]'\`."; \
	  echo "# Regenerate with \`make lock TORCH=$(TORCH) TORCH_PIN=$(TORCH_PIN) VISION_PIN=$(VISION_PIN)\` (docs/torch-versions.md: \"Adding a torch release\")."; \
	  $(PY) -m pip freeze --exclude-editable; } > $(CONSTRAINTS)
	touch $(STAMP)

clean:
	rm -rf .venv $(VENV) $(foreach line,$(TORCH_VERSIONS),.venv-$(line)) build *.egg-info src/*.egg-info .pytest_cache
