PYTHON ?= python3
PIP ?= $(PYTHON) -m pip

.PHONY: setup demo test test-gpu bench

setup:  ## install the package with its test extra (and torch 2.13.0 where no torch is installed)
	$(PYTHON) -c "import torch" 2>/dev/null || $(PIP) install -q "torch==2.13.0"
	$(PIP) install -q -e ".[test]"

demo: setup  ## compile a small model with backend="nvf_bookend" and print explain()
	$(PYTHON) examples/demo.py

test: setup  ## CPU test suite (GPU tests skip themselves)
	$(PYTHON) -m pytest -q -m "not gpu" tests

test-gpu:  ## GPU suite, on a machine with CUDA and nvFuser
	$(PYTHON) -m pytest -q -m gpu tests -rs

bench:  ## benchmark suite (GPU)
	$(PYTHON) -m perf
