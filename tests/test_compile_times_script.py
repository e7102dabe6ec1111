"""scripts/compile_times.py runs end to end (CPU smoke run: tiny shapes, regions eager), so a GPU
measurement of compile times does not fail on the script itself."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_compile_times_script_smoke(tmp_path):
    out = tmp_path / "times.json"
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "compile_times.py"), "--device", "cpu", "--backends", "nvf_bookend",
         "--only", "llama_fwd_bf16_small", "--json", str(out)],
        capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-2000:]
    (row,) = json.loads(out.read_text())
    for run in ("nvf_cold", "nvf_warm"):
        assert "error" not in row[run], row[run]
        assert row[run]["first_call_s"] > 0 and row[run]["regions"] > 0
        assert row[run]["planning_s"] > 0
    assert "llama_fwd_bf16_small" in result.stdout
