#!/usr/bin/env bash
# One device call's worth of evidence, written under $OUT (at most 8 files come back).
#   scripts/gpu_evidence.sh tests   GPU test suite, explain() reports, host latency, OpInfo sweep
#   scripts/gpu_evidence.sh perf    perf/ default set, a second run against it, untrimmed-vs-trimmed check
# Run from the repo root after: source .gpu/nvf_setup.sh (and, for the OpInfo sweep, the expecttest
# wheel carried in .whl/ on PYTHONPATH).
set -u
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
case "${1:-tests}" in
  tests)
    timeout 60 python3 tests/gpu_explain_runs.py seed001 > "$OUT/explain_seed001.txt" 2>&1
    timeout 90 python3 tests/gpu_explain_runs.py gpt_block > "$OUT/explain_gpt_block.txt" 2>&1
    python3 scripts/host_latency.py > "$OUT/host_latency.log" 2>&1
    timeout 240 python3 -m pytest -q -m gpu tests -p no:cacheprovider --tb=short -rfs \
      --deselect tests/test_gpu_opinfo.py::test_opinfo_sweep > "$OUT/gpu_tests.log" 2>&1
    NVF_OPINFO_BUDGET_S=${NVF_OPINFO_BUDGET_S:-200} NVF_OPINFO_REPORT="$OUT/opinfo.txt" \
      timeout 300 python3 -m pytest -q tests/test_gpu_opinfo.py -p no:cacheprovider --tb=line > "$OUT/opinfo_pytest.log" 2>&1
    tail -n 3 "$OUT/gpu_tests.log"; grep -E "^FAILED" "$OUT/gpu_tests.log" | head -20
    head -n 1 "$OUT/opinfo.txt" 2>/dev/null; tail -n 2 "$OUT/opinfo_pytest.log"
    cat "$OUT/host_latency.log"
    ;;
  perf)
    timeout 300 python3 -m perf --json "$OUT/perf_run1.json" > "$OUT/perf_run1.log" 2>&1; echo "run1 rc=$?"
    timeout 150 python3 -m perf --quick --backends eager,inductor,nvf_bookend,nvf_untrimmed,dynamo_eager \
      --baseline "$OUT/perf_run1.json" --json "$OUT/perf_run2.json" > "$OUT/perf_run2.log" 2>&1; echo "run2 rc=$?"
    python3 -m perf --compare "$OUT/perf_run1.json" --baseline "$OUT/perf_run1.json" \
      --compare-backend nvf_untrimmed --baseline-backend nvf_bookend > "$OUT/untrimmed_vs_trimmed.log" 2>&1
    echo "untrimmed-vs-trimmed rc=$?"; tail -n 2 "$OUT/perf_run2.log"; tail -n 2 "$OUT/untrimmed_vs_trimmed.log"
    ;;
esac
