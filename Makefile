PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
RESULTS ?= perf/results
NPROC ?= 2

.PHONY: setup demo test test-gpu test-gpu-distributed bench bench-quick bench-check bench-models \
	bench-compile bench-host bench-distributed help

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

setup:  ## install the package with its test extra (and torch 2.13.0 where no torch is installed)
	$(PYTHON) -c "import torch" 2>/dev/null || $(PIP) install -q "torch==2.13.0"
	$(PIP) install -q -e ".[test]"

demo: setup  ## compile a small model with backend="nvf_bookend" and print explain()
	$(PYTHON) examples/demo.py

test: setup  ## CPU test suite (GPU tests skip themselves)
	$(PYTHON) -m pytest -q -m "not gpu" tests

test-gpu:  ## GPU suite, on a machine with CUDA and nvFuser (SHARD=I/N: every N-th test from the I-th)
	$(PYTHON) -m pytest -q -m gpu tests -rs $(if $(SHARD),--shard $(SHARD))

test-gpu-distributed:  ## DDP and FSDP2 GPU tests, on a machine with 2+ GPUs
	$(PYTHON) -m pytest -q -m gpu tests/test_gpu_distributed.py -rs

bench:  ## benchmark suite (GPU; the block workloads), tables plus a JSON file under perf/results/
	$(PYTHON) -m perf

bench-quick:  ## the seed workloads only (GPU)
	$(PYTHON) -m perf --quick

bench-check:  ## exit 1 on a GPU-time regression against the stored baseline (GPU)
	$(PYTHON) -m perf --baseline perf/baseline.json --json $(RESULTS)/latest.json

bench-models:  ## the model tier: whole networks' step, host and kernel time against inductor (GPU)
	$(PYTHON) -m perf --tag model --json $(RESULTS)/models.json

bench-compile:  ## first-call (compile) time per model workload, each in a fresh process (GPU)
	$(PYTHON) scripts/compile_times.py --json $(RESULTS)/compile_times.json

bench-host:  ## host microseconds per call: regions, steps, the wrapper's cost (GPU)
	$(PYTHON) scripts/host_latency.py

bench-distributed:  ## DDP/FSDP2 training steps per backend under torchrun, NPROC GPUs (exit 1 on a loss mismatch)
	$(PYTHON) -m torch.distributed.run --standalone --nproc-per-node $(NPROC) -m perf.distributed \
		--model llama --wrappers ddp,fsdp2,fsdp2-model --backends eager,inductor,nvf_bookend \
		--steps 20 --dtype bf16 --batch large --json $(RESULTS)/distributed.json --check
