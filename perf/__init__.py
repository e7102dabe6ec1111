"""Benchmark suite for the ``nvf_bookend`` torch.compile backend of dynamo_nvf.

Run ``python -m perf --help``.  Modules: :mod:`perf.workloads` (what is timed: the registry),
:mod:`perf.models` and :mod:`perf.external_models` (the model tier's networks),
:mod:`perf.backends` (how it is compiled), :mod:`perf.measure` (timing, GPU only; its
``host_time`` is the project's one host metric), :mod:`perf.report` (JSON documents, tables,
joining shards), :mod:`perf.acceptance` (issue #10's ratio criteria), :mod:`perf.baseline`
(regression check), :mod:`perf.env` (environment header).  Only :mod:`perf.measure` needs a
GPU, so tables and comparisons can be rebuilt from stored result files anywhere.
"""

__all__ = ["acceptance", "backends", "baseline", "env", "external_models", "measure", "models", "report", "workloads"]
