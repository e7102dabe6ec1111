"""Benchmark suite for the ``nvf_bookend`` torch.compile backend of dynamo_nvf.

Run ``python -m perf --help``.  Modules: :mod:`perf.workloads` (what is timed),
:mod:`perf.backends` (how it is compiled), :mod:`perf.measure` (timing, GPU only),
:mod:`perf.report` (JSON documents and tables), :mod:`perf.baseline` (regression check),
:mod:`perf.env` (environment header).  Only :mod:`perf.measure` needs a GPU, so tables
and comparisons can be rebuilt from stored result files anywhere.
"""

__all__ = ["backends", "baseline", "env", "measure", "report", "workloads"]
