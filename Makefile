PYTHON ?= python3
PIP ?= $(PYTHON) -m pip

.PHONY: setup demo test test-gpu bench bench-quick bench-check

setup:  ## install the package with its test extra (and torch 2.13.0 where no torch is installed)
	$(PYTHON) -c "import torch" 2>/dev/null || $(PIP) install -q "torch==2.13.0"
	$(PIP) install -q -e ".[test]"

demo: setup  ## compile a small model with backend="nvf_bookend" and print explain()
	$(PYTHON) examples/demo.py

test: setup  ## CPU test suite (GPU tests skip themselves)
	$(PYTHON) -m pytest -q -m "not gpu" tests

test-gpu:  ## GPU suite, on a machine with CUDA and nvFuser
	$(PYTHON) -m pytest -q -m gpu tests -rs

bench:  ## benchmark suite (GPU), tables plus a JSON file under perf/results/
	$(PYTHON) -m perf

bench-quick:  ## the seed workloads only (GPU)
	$(PYTHON) -m perf --quick

bench-check:  ## exit 1 on a GPU-time regression against the stored baseline (GPU)
	$(PYTHON) -m perf --baseline perf/baseline.json --json perf/results/latest.json
