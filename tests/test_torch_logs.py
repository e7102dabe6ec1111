"""TORCH_LOGS reaches the backend's log as it reaches inductor's: "+dynamo_nvf" prints every plan at
DEBUG, "dynamo_nvf" one line per graph at INFO, both through torch's handler and format.

TORCH_LOGS is read when torch is imported, so each case runs in a fresh interpreter (all at once).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from dynamo_nvf.logs import _named_in_torch_logs

ROOT = Path(__file__).resolve().parent.parent

#: Compiles one small program (planned as for CUDA, so it has a region) and reports how torch's
#: logging holds the "dynamo_nvf" log; with "set_logs", first without logs, then after set_logs.
PROGRAM = r'''
import json, logging, sys
import torch
import dynamo_nvf
from torch._logging import _internal

def state():
    log = logging.getLogger("dynamo_nvf")
    return {"is_log": _internal.log_registry.is_log("dynamo_nvf"),
            "child": "dynamo_nvf" in _internal.log_registry.child_log_qnames,
            "level": log.getEffectiveLevel()}

def run(scale):
    fn = lambda x: torch.tanh(torch.sigmoid(x) * scale) + 1
    torch.compile(fn, backend="nvf_bookend", options={"plan_cpu_as_cuda": True})(torch.randn(8, 8))

states = [state()]
if sys.argv[1:] == ["set_logs"]:
    run(2.0)
    print("MARK", file=sys.stderr, flush=True)
    torch._logging.set_logs(modules={"dynamo_nvf": logging.DEBUG})
    states.append(state())
run(3.0)
print(json.dumps(states))
'''


def _env(torch_logs: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TORCH_LOGS", "TORCH_LOGS_OUT")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if torch_logs is not None:
        env["TORCH_LOGS"] = torch_logs
    return env


def _start(args: list[str], torch_logs: str | None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *args], cwd=ROOT, env=_env(torch_logs), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _finish(proc: subprocess.Popen) -> tuple[str, str]:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-4000:]
    return out, err


# torch's format: level letter, date, time, pid, path:line]
_DEBUG_PLAN = re.compile(r"^V\d{4} [\d:.]+ +\d+ \S*dynamo_nvf/backend\.py:\d+\] .*dynamo_nvf plan:", re.M)
_INFO_GRAPH = re.compile(r"^I\d{4} [\d:.]+ +\d+ \S*dynamo_nvf/backend\.py:\d+\] .*dynamo_nvf: inference graph", re.M)


def test_torch_logs_reaches_the_dynamo_nvf_log(tmp_path):
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    procs = {
        "demo_debug": _start(["examples/demo.py"], "+dynamo_nvf"),
        "info": _start([str(script)], "dynamo_nvf"),
        "set_logs": _start([str(script), "set_logs"], None),
    }
    results = {name: _finish(proc) for name, proc in procs.items()}

    # TORCH_LOGS="+dynamo_nvf" python examples/demo.py: the whole plan of every graph, at DEBUG.
    _, err = results["demo_debug"]
    assert _DEBUG_PLAN.search(err), err[-2000:]
    assert _INFO_GRAPH.search(err)
    plan_lines = [line for line in err.splitlines() if line.startswith("V")]
    for expected in ("== inference graph", "== forward graph", "== backward graph", "nvf_region_0", "why eager"):
        assert any(expected in line for line in plan_lines), expected

    # TORCH_LOGS="dynamo_nvf": one line per graph, no plan.
    out, err = results["info"]
    assert _INFO_GRAPH.search(err), err[-2000:]
    assert "dynamo_nvf plan:" not in err
    (state,) = json.loads(out)
    assert state == {"is_log": True, "child": False, "level": 20}

    # No TORCH_LOGS: the log is registered with torch and silent below WARNING until set_logs.
    out, err = results["set_logs"]
    before, after = err.split("MARK\n")
    assert "graph" not in before and "dynamo_nvf plan:" not in before, before[-2000:]
    assert _DEBUG_PLAN.search(after) and _INFO_GRAPH.search(after), after[-2000:]
    assert json.loads(out) == [{"is_log": True, "child": False, "level": 30},
                               {"is_log": True, "child": False, "level": 10}]


def test_which_torch_logs_settings_name_the_log():
    assert _named_in_torch_logs("+dynamo_nvf")
    assert _named_in_torch_logs("dynamo, -dynamo_nvf")
    assert _named_in_torch_logs("dynamo_nvf.backend")
    assert not _named_in_torch_logs("+dynamo,inductor")
    assert not _named_in_torch_logs("dynamo_nvfx")
    assert not _named_in_torch_logs("")
