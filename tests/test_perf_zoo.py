"""CPU tests of the model zoo (perf/zoo.py, perf/zoo_models.txt, perf/zoo_report.py, perf/isolate.py):
the list, registration without importing timm / transformers, depth cuts, the fp64 accuracy check,
the ATen-op grouping, the zoo tables and criteria, per-workload processes (crash, timeout), and,
where timm / transformers are installed, every zoo model built and run for one tiny step (f32 on
the CPU).  A GPU test at the end runs one zoo workload through the CLI."""

from __future__ import annotations

import copy
import importlib.abc
import importlib.machinery
import importlib.util
import signal
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from torch import nn

from dynamo_nvf import nvf as nvf_env
from perf import zoo
from perf import zoo_report as zr
from perf.isolate import child_command, describe_exit, merge, run_child
from perf.measure import aten_category, empty_record
from perf.workloads import REGISTRY, Instance, select, shard

REPO = Path(__file__).resolve().parents[1]
ENTRIES = zoo.read_list()


# ----------------------------------------------------------------------------- the list


def test_list_covers_the_zoo():
    timm = [e for e in ENTRIES if e.suite == "timm"]
    hf = [e for e in ENTRIES if e.suite == "hf"]
    assert len(ENTRIES) >= 30 and len(timm) >= 15 and len(hf) >= 12
    assert all(e.model in zoo.HF_MODELS for e in hf), "every transformers class has a config in HF_MODELS"
    for e in ENTRIES:
        zoo.parse_cut(e.cut)  # every cut parses
        assert e.batch >= 8 and e.size >= 224
    kinds = {zoo.HF_MODELS[e.model].inputs for e in hf}
    assert {"text", "causal", "seq2seq", "image"} <= kinds and kinds & {"audio", "whisper"}


def test_list_rejects_bad_lines(tmp_path):
    bad = tmp_path / "zoo.txt"
    bad.write_text("timm resnet50 resnet50 64 224\n")
    with pytest.raises(ValueError, match="want"):
        zoo.read_list(bad)
    bad.write_text("timm a resnet50 64 224 -\ntimm a resnet18 64 224 -\n")
    with pytest.raises(ValueError, match="duplicate"):
        zoo.read_list(bad)


def test_cut_keywords_and_slices():
    kwargs, slices = zoo.parse_cut("layers=1,1,1,1;depth=2;stages.*.blocks[:1];blocks[:4]")
    assert kwargs == {"layers": (1, 1, 1, 1), "depth": 2}
    assert slices == [("stages.*.blocks", 1), ("blocks", 4)]
    assert zoo.parse_cut("-") == ({}, [])
    with pytest.raises(ValueError):
        zoo.parse_cut("nonsense")

    def stage():
        s = nn.Module()
        s.blocks = nn.Sequential(*[nn.Linear(2, 2) for _ in range(3)])
        return s

    model = nn.Module()
    model.stages = nn.Sequential(stage(), stage())
    zoo.apply_slices(model, [("stages.*.blocks", 1)])
    assert [len(s.blocks) for s in model.stages] == [1, 1]
    zoo.apply_slices(model, [("stages", 1)])
    assert len(model.stages) == 1


# ----------------------------------------------------------------------------- registration


def _zoo_names() -> list[str]:
    return [w.name for w in REGISTRY.values() if "zoo" in w.tags]


def test_zoo_is_opt_in_and_tagged():
    names = _zoo_names()
    if not names:
        pytest.skip("neither timm nor transformers is installed: no zoo workload registered")
    assert not set(names) & {w.name for w in select()}, "the zoo never joins a plain run"
    assert not set(names) & {w.name for w in select(tags=["model"])}
    chosen = select(tags=["zoo"])
    assert {w.name for w in chosen} >= set(names)
    for name in names:
        wl = REGISTRY[name]
        assert wl.tags & {"timm", "hf"} and wl.dtype == torch.bfloat16 and not wl.default
        assert wl.timing in ("step", "dynamic")
        if wl.timing == "step":
            assert wl.check is not None and wl.aten_ops
    parts = [shard([w for w in chosen if "zoo" in w.tags], i, 4) for i in range(1, 5)]
    assert sorted(w.name for p in parts for w in p) == sorted(names)


def test_zoo_workloads_per_entry():
    for e in ENTRIES:
        if not zoo.library_available(e.library):
            continue
        assert {e.workload("fwd"), e.workload("train")} <= set(REGISTRY)
        dyn = e.suite == "hf" and zoo.HF_MODELS[e.model].inputs in zoo.TEXT_INPUTS
        assert (e.workload("dyn") in REGISTRY) == dyn
        if dyn:
            lengths = zoo.dynamic_lengths(e)
            assert len(set(lengths)) == 3 and max(lengths) == e.size


def test_list_does_not_import_the_libraries():
    """--list --tag zoo in a fresh process: lists the zoo where the libraries are installed, says so
    where they are not, and imports neither."""
    code = ("import sys; from perf.__main__ import main; rc = main(['--list', '--tag', 'zoo']); "
            "print('IMPORTED', 'timm' in sys.modules, 'transformers' in sys.modules); sys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=str(REPO))
    assert "IMPORTED False False" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
    for lib, suite in (("timm", "timm"), ("transformers", "hf")):
        listed = f"| zoo_{suite}_" in done.stdout
        assert listed == zoo.library_available(lib)
        assert (f"{lib} is not installed" in done.stderr) == (not zoo.library_available(lib))
    assert done.returncode == (0 if any(zoo.library_available(lib) for lib in ("timm", "transformers")) else 2)


def test_zoo_note_names_missing_libraries(monkeypatch, capsys):
    from perf import __main__ as cli

    monkeypatch.setattr(zoo, "missing_libraries", lambda: ["timm"])
    cli._zoo_note(cli.build_parser().parse_args(["--list", "--tag", "zoo"]))
    assert "timm is not installed" in capsys.readouterr().err
    cli._zoo_note(cli.build_parser().parse_args(["--list"]))
    assert capsys.readouterr().err == ""


# ----------------------------------------------------------------------------- accuracy


class _BNNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).mean((2, 3)))


def test_compare_passes_equal_and_fails_wrong():
    torch.manual_seed(0)
    ref64 = [torch.randn(64, 64, dtype=torch.float64)]
    ref = [ref64[0].to(torch.bfloat16)]
    ok = zoo.compare(ref, [ref[0].clone()], ref64, zoo.TOLERANCE["fwd"])
    assert ok["accuracy"] == "pass" and ok["acc_rmse_ratio"] == pytest.approx(1.0)
    bad = zoo.compare(ref, [ref[0] + 0.5], ref64, zoo.TOLERANCE["fwd"])
    assert bad["accuracy"] == "fail" and bad["acc_rmse_ratio"] > 3 and bad["acc_detail"]


def test_a_tensor_zero_within_eagers_error_is_left_out_of_the_ratio():
    """A gradient that is zero in exact math (1e-21 in fp64) holds bf16 rounding noise on both sides:
    its rmse ratio says nothing and is left out; a real tensor beside it still sets the ratio."""
    torch.manual_seed(0)
    signal = torch.randn(64, 64, dtype=torch.float64)
    zero = 1e-21 * torch.randn(64, dtype=torch.float64)
    ref64 = [signal, zero]
    ref = [signal.to(torch.bfloat16), (1e-9 * torch.randn(64)).to(torch.bfloat16)]
    res = [ref[0].clone(), (1e-7 * torch.randn(64)).to(torch.bfloat16)]  # 100x the noise of eager's
    out = zoo.compare(ref, res, ref64, zoo.TOLERANCE["train"])
    assert out["accuracy"] == "pass" and out["acc_rmse_ratio"] == pytest.approx(1.0)
    worse = [(ref[0].double() + 0.05 * torch.randn(64, 64, dtype=torch.float64)).to(torch.bfloat16), res[1]]
    assert zoo.compare(ref, worse, ref64, zoo.TOLERANCE["train"])["acc_rmse_ratio"] > 3


@pytest.mark.parametrize("kind", ["fwd", "train"])
def test_checked_first_call(kind):
    """Eager passes its own check; a step that computes something else fails it.  Training compares
    the loss and every gradient; the module's state before the first call is what the references use."""
    from perf.models import WithLoss

    torch.manual_seed(0)
    x = torch.randn(4, 3, 8, 8, dtype=torch.bfloat16)
    if kind == "fwd":
        model = _BNNet().to(torch.bfloat16).eval()
        inst = Instance(fn=model, inputs=(x,))
        right, wrong = (lambda: model(x)), (lambda: model(x) * 1.5)
    else:
        module = WithLoss(_BNNet().to(torch.bfloat16).train())
        target = torch.randint(0, 10, (4,))

        def train_step(*inputs):
            loss = module(*inputs)
            loss.backward()
            return loss.detach()

        train_step.module = module
        inst = Instance(fn=train_step, inputs=(x, target))
        right = lambda: train_step(x, target)  # noqa: E731

        def wrong():
            loss = module(x, target) * 2.0
            loss.backward()
            return loss.detach()

    seconds, acc = zoo.checked_first_call(inst, right, kind, key=f"test_{kind}")
    assert seconds >= 0 and acc["accuracy"] == "pass", acc
    _, acc = zoo.checked_first_call(inst, wrong, kind, key=f"test_{kind}")  # the cached references
    assert acc["accuracy"] == "fail"
    _, acc = zoo.checked_first_call(inst, wrong, kind)
    assert acc["accuracy"] == "fail"


def test_missing_reference_is_said_not_raised():
    model = nn.Linear(4, 4).to(torch.bfloat16).eval()
    inst = Instance(fn=model, inputs=(torch.randn(2, 3, dtype=torch.bfloat16),))  # wrong width: eager fails too
    with pytest.raises(RuntimeError):
        zoo.checked_first_call(inst, lambda: model(*inst.inputs), "fwd")
    inst = Instance(fn=model, inputs=(torch.randn(2, 4, dtype=torch.bfloat16),))
    zoo._REFERENCES[:] = [("broken", None, None, "RuntimeError: no fp64 kernel")]
    _, acc = zoo.checked_first_call(inst, lambda: model(*inst.inputs), "fwd", key="broken")
    assert acc["accuracy"] == "no reference" and "fp64" in acc["acc_detail"]


def test_aten_categories():
    assert aten_category("aten::addmm") == "matmul" and aten_category("aten::mm") == "matmul"
    assert aten_category("aten::bmm") == "matmul"
    assert aten_category("aten::cudnn_convolution") == "conv" and aten_category("aten::convolution_backward") == "conv"
    assert aten_category("aten::_scaled_dot_product_flash_attention") == "sdpa"
    assert aten_category("aten::roll") == "other" and aten_category("aten::native_batch_norm") == "other"


# ----------------------------------------------------------------------------- tables


def _rec(step, kernel, first, mem, acc="pass", **extra):
    rec = empty_record()
    rec.update(step_ms=step, kernel_ms=kernel, compile_s=first, peak_mem_mb=mem, accuracy=acc, acc_rmse_ratio=1.0,
               kernels=10.0, **extra)
    return rec


def _zoo_doc() -> dict:
    from perf.report import make_document

    backends = ["eager", "inductor", "inductor_ro", "nvf_bookend", "nvf_cudagraphs"]
    ops = [["aten::roll", "other", 50.0, 2.0], ["aten::mm", "matmul", 400.0, 8.0]]
    results = {
        "zoo_timm_a_fwd_bf16": {b: _rec(1.0, 0.8, 10.0, 100.0) for b in backends},
        "zoo_hf_b_train_bf16": {b: _rec(2.0, 1.5, 20.0, 200.0) for b in backends},
        "zoo_hf_b_dyn_bf16": {b: dict(empty_record(), recompiles=1, dyn_lengths=[128, 256, 512], dyn_graphs=[1, 1, 0],
                                      dyn_step_ms=[1.0, 2.0, 3.0], step_ms=1.8) for b in backends},
    }
    results["zoo_timm_a_fwd_bf16"]["nvf_bookend"] = _rec(1.5, 0.9, 12.0, 105.0, aten_ops=ops,
                                                         aten_ms={"matmul": 0.4, "conv": 0, "sdpa": 0, "other": 0.05,
                                                                  "fused": 0.45})
    results["zoo_timm_a_fwd_bf16"]["inductor"]["aten_ms"] = {"matmul": 0.4001, "conv": 0, "sdpa": 0, "other": 0.0,
                                                             "fused": 0.4}
    results["zoo_hf_b_train_bf16"]["nvf_cudagraphs"] = _rec(1.0, 1.0, 1.0, 1.0, acc="fail")
    metas = {
        "zoo_timm_a_fwd_bf16": {"tags": ["zoo", "timm", "fwd", "bf16"], "timing": "step"},
        "zoo_hf_b_train_bf16": {"tags": ["zoo", "hf", "train", "bf16"], "timing": "step"},
        "zoo_hf_b_dyn_bf16": {"tags": ["zoo", "hf", "dyn", "bf16"], "timing": "dynamic"},
    }
    return make_document(env={}, config={"run_workloads": list(results)}, backends=backends, workloads=metas,
                         results=results, roofline=None)


def test_status_names_regions_that_fell_back():
    doc = _zoo_doc()
    wl = "zoo_timm_a_fwd_bf16"
    assert zr.status(doc, wl) == "pass"
    assert zr.fallback_table(doc) == ""
    doc["results"][wl]["nvf_bookend"]["fallbacks"] = 3
    doc["results"][wl]["nvf_bookend"]["fallback_reasons"] = ["nvf_region_4 (aten.var_mean.correction): Vectorized\n"
                                                             "accesses cannot be inline with computation"]
    assert zr.status(doc, wl) == "pass, 3 region(s) fell back to eager"
    text = zr.render_zoo(doc)
    assert "3 region(s) fell back" in text and zr.fallback_table(doc) in text
    table = zr.fallback_table(doc).splitlines()
    assert table[0] == "### Zoo: regions that fell back to eager (nvFuser errors)"
    row = [c.strip() for c in table[-1].strip("|").split("|")]
    assert row == ["timm_a_fwd_bf16", "nvf_bookend",
                   "nvf_region_4 (aten.var_mean.correction): Vectorized accesses cannot be inline with computation"]


def test_zoo_tables_and_criteria():
    doc = _zoo_doc()
    assert doc["acceptance"] == [], "the zoo is not judged by the model tier's criteria"
    text = zr.render_zoo(doc)
    assert "### Zoo: timm inference (bf16)" in text and "### Zoo: hf training step (bf16)" in text
    assert "### Zoo geomeans" in text and "roll" in text and "128/256/512" in text
    assert "accuracy (rmse" in text  # the failed check of nvf_cudagraphs
    gap = zr.gap_table(doc).splitlines()
    assert gap[0] == "### Zoo: GPU time per step by kind, nvf_bookend minus inductor (ms)" and gap[0] in text
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in gap[4:]]
    # matmul, conv, sdpa, other ATen, fused; the one workload with both records, then the sum
    assert rows == [["timm_a_fwd_bf16", "0.800 / 0.900", "+0.000", "+0.000", "+0.000", "+0.050", "+0.050"],
                    ["all (1)", "0.800 / 0.900", "+0.000", "+0.000", "+0.000", "+0.050", "+0.050"]]
    del doc["results"]["zoo_timm_a_fwd_bf16"]["inductor"]["aten_ms"]["fused"]  # a record without every kind
    assert zr.gap_table(doc) == ""
    rows = {r[0]: r for r in zr.evaluate(doc)}
    assert rows["no model's step time above 1.25x inductor"][-1] == "FAIL"  # 1.5x on timm a
    assert rows["peak memory geomean <= 1.1x inductor's"][-1] == "PASS"
    assert rows["every model runs and matches fp64 within inductor's tolerance (nvf_bookend)"][-1] == "PASS"
    assert rows["every model runs and matches fp64 within inductor's tolerance (nvf_cudagraphs)"][-1] == "FAIL"
    assert rows["dynamic shapes: no more recompiles than inductor"][-1] == "PASS"
    assert not zr.zoo_passed(doc)
    from perf.report import render_report

    assert "### Zoo acceptance" in render_report(doc)


def test_report_cli_joins_zoo_shards(tmp_path):
    from perf.__main__ import main
    from perf.report import write_document

    doc = _zoo_doc()
    a, b = copy.deepcopy(doc), copy.deepcopy(doc)
    a["results"] = {k: v for k, v in doc["results"].items() if "timm" in k}
    b["results"] = {k: v for k, v in doc["results"].items() if "timm" not in k}
    a["config"], b["config"] = {"shard": [1, 2], "run_workloads": list(a["results"])}, \
        {"shard": [2, 2], "run_workloads": list(b["results"])}
    pa, pb = write_document(a, tmp_path / "a.json"), write_document(b, tmp_path / "b.json")
    assert main(["--report", str(pa), str(pb), "--json", str(tmp_path / "j.json")]) == 0
    assert main(["--report", str(tmp_path / "j.json"), "--acceptance"]) == 1  # the zoo's criteria fail


def test_baseline_flags_a_failed_accuracy_check():
    """--compare against a stored zoo file: a pair whose fp64 check now fails regresses, even at
    the same step time; one that failed before and now passes does not."""
    from perf import baseline as bl

    base = _zoo_doc()
    new = copy.deepcopy(base)
    wl = "zoo_timm_a_fwd_bf16"
    new["results"][wl]["inductor"]["accuracy"] = "fail"
    new["results"]["zoo_hf_b_train_bf16"]["nvf_cudagraphs"]["accuracy"] = "pass"
    cmp = bl.compare(new, base, metric="step_ms")
    flagged = {(r.workload, r.backend) for r in cmp.regressions}
    assert flagged == {(wl, "inductor")} and cmp.exit_code == 1


# ----------------------------------------------------------------------------- isolation


def test_child_command_passes_settings_on():
    from perf.__main__ import build_parser

    args = build_parser().parse_args(["--tag", "zoo", "--quick", "--iters", "7", "--no-host", "--isolate", "60"])
    cmd = child_command(args, "zoo_timm_resnet50_fwd_bf16", ["inductor", "nvf_bookend"], Path("x.json"))
    assert cmd[1:] == ["-m", "perf", "--only", "zoo_timm_resnet50_fwd_bf16", "--backends", "inductor,nvf_bookend",
                       "--json", "x.json", "--iters", "7", "--no-host", "--quick"]


def test_crash_and_timeout_become_errors(tmp_path):
    env = dict(__import__("os").environ)
    code, timed_out = run_child([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"],
                                60, tmp_path / "crash.log", env)
    assert not timed_out and describe_exit(code, timed_out, 60) == "[process] killed by SIGSEGV"
    code, timed_out = run_child([sys.executable, "-c", "import time; time.sleep(60)"], 1, tmp_path / "hang.log", env)
    assert timed_out and "timed out after 1 s" in describe_exit(code, timed_out, 1)
    assert "CUDA context was lost" in describe_exit(3, False, 1)

    wl = types.SimpleNamespace(name="zoo_timm_a_fwd_bf16", cost=1.0, meta=lambda: {"tags": ["zoo"], "timing": "step"})
    done = {"results": {wl.name: {"eager": _rec(1.0, 1.0, 1.0, 1.0)}}, "env": {"gpu": "x"}}
    doc = merge([done], {wl.name: "[process] killed by SIGSEGV"}, [wl], ["eager", "nvf_bookend"], {"run_workloads": [wl.name]})
    assert doc["results"][wl.name]["eager"]["error"] is None
    assert doc["results"][wl.name]["nvf_bookend"]["error"] == "[process] killed by SIGSEGV"


@pytest.mark.parametrize("gpus", [[], ["--gpus", "2"], ["--per-gpu", "2"]], ids=["one", "two-gpus", "two-per-gpu"])
def test_isolated_run_records_children_without_a_gpu(tmp_path, gpus):
    """Without CUDA every child exits 2 (no device); each pair then holds why, and the file is written."""
    if torch.cuda.is_available():
        pytest.skip("CPU-only behaviour")
    out = tmp_path / "iso.json"
    done = subprocess.run([sys.executable, "-m", "perf", "--only", "gelu_views,lone_reshape", "--backends", "eager",
                           "--isolate", "120", *gpus, "--json", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=str(REPO))
    assert done.returncode == 0, done.stderr[-2000:]
    import json

    doc = json.loads(out.read_text())
    for wl in ("gelu_views", "lone_reshape"):
        assert doc["results"][wl]["eager"]["error"] == "[process] exited with status 2 before this pair"
    if gpus and gpus[0] == "--gpus":
        assert "GPU 0: " in done.stderr and "GPU 1: " in done.stderr
    assert doc["config"]["per_gpu"] == (2 if "--per-gpu" in gpus else 1)


def test_workers_per_gpu_share_one_turn_lock_and_the_cpus(tmp_path):
    from perf.gpu_turn import LOCK_ENV
    from perf.isolate import slot_env, worker_slots

    assert worker_slots(2, 1) == [(0, 0), (1, 0)]
    assert worker_slots(1, 3) == [(None, 0), (None, 1), (None, 2)]
    assert worker_slots(2, 2) == [(0, 0), (1, 0), (0, 1), (1, 1)]
    env = slot_env({}, 1, 2, 4, tmp_path)
    assert env["CUDA_VISIBLE_DEVICES"] == "1" and env[LOCK_ENV] == str(tmp_path / "gpu1.lock")
    assert int(env["TORCHINDUCTOR_COMPILE_THREADS"]) == max(1, (__import__("os").cpu_count() or 1) // 4)
    assert LOCK_ENV not in slot_env({}, 0, 1, 2, tmp_path)  # one worker per GPU: no turns
    # --gpus counts the GPUs this process sees: a parent limited to GPUs 2 and 3 hands out 2 and 3
    assert slot_env({"CUDA_VISIBLE_DEVICES": "2,3"}, 0, 1, 2, tmp_path)["CUDA_VISIBLE_DEVICES"] == "2"
    assert slot_env({"CUDA_VISIBLE_DEVICES": "2, 3"}, 1, 1, 2, tmp_path)["CUDA_VISIBLE_DEVICES"] == "3"
    # the turn lock is the physical GPU's; no GPU the parent was not given, and none where it had none
    assert slot_env({"CUDA_VISIBLE_DEVICES": "2,3"}, 1, 2, 4, tmp_path)[LOCK_ENV] == str(tmp_path / "gpu3.lock")
    for listed, gpu in (("2,3", 2), ("5", 1), ("", 0), ("2,-1,3", 1)):
        with pytest.raises(ValueError, match="CUDA_VISIBLE_DEVICES"):
            slot_env({"CUDA_VISIBLE_DEVICES": listed}, gpu, 1, 2, tmp_path)
    assert slot_env({"TORCHINDUCTOR_COMPILE_THREADS": "7"}, None, 2, 2, tmp_path)["TORCHINDUCTOR_COMPILE_THREADS"] == "7"


def test_gpu_turn_holds_the_lock_exclusively_and_nests(tmp_path, monkeypatch):
    import fcntl

    from perf.gpu_turn import LOCK_ENV, gpu_turn

    path = tmp_path / "gpu0.lock"
    monkeypatch.setenv(LOCK_ENV, str(path))

    def free() -> bool:
        with open(path, "a") as other:  # a second open file: flock conflicts with it as with another process
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            fcntl.flock(other, fcntl.LOCK_UN)
            return True

    with gpu_turn():
        assert not free()
        with gpu_turn():  # nested: no second lock, no deadlock
            assert not free()
        assert not free()
    assert free()
    monkeypatch.delenv(LOCK_ENV)
    with gpu_turn():  # no lock file: nothing to take
        assert not path.with_name("other").exists()


# ----------------------------------------------------------------------------- every model, one tiny step


class _DropPath(nn.Module):
    """timm's DropPath in miniature: drops each sample's residual branch with `drop_prob`."""

    def __init__(self, drop_prob: float) -> None:
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or not self.drop_prob:
            return x
        keep = torch.rand(x.shape[0], 1, device=x.device) >= self.drop_prob
        return x * keep / (1 - self.drop_prob)


def test_training_randomness_is_off():
    """Stochastic depth and dropout at probability 0: two training-mode forwards agree (a random step
    against eager copies that draw other masks would make the accuracy check say nothing)."""
    model = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5), _DropPath(0.5)).train()
    x = torch.randn(64, 8)
    assert not torch.equal(model(x), model(x))
    model = zoo.without_randomness(model)
    assert torch.equal(model(x), model(x))
    assert zoo.without_randomness(nn.Sequential(nn.Dropout2d(0.3)))[0].p == 0.0


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """torchvision stand-in for timm's module-level imports where torchvision is not installed (this
    CPU machine: the PyPI wheel needs a CUDA torch); nothing the zoo's models use comes from it."""

    def find_spec(self, fullname, path, target=None):
        if fullname == "torchvision" or fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        import enum

        class Module(types.ModuleType):
            __path__: list = []

            def __getattr__(self, name):
                if name.startswith("__"):
                    raise AttributeError(name)
                if name == "InterpolationMode":
                    return enum.Enum(name, "NEAREST BILINEAR BICUBIC BOX HAMMING LANCZOS NEAREST_EXACT")
                return type(name, (), {"__init__": lambda self, *a, **k: None})

        return Module(spec.name)

    def exec_module(self, module):
        module.__version__ = "0.0.0"


@pytest.fixture(scope="module")
def libraries():
    finder = None
    if importlib.util.find_spec("timm") is not None and importlib.util.find_spec("torchvision") is None \
            and "timm" not in sys.modules:
        finder = _StubFinder()
        sys.meta_path.insert(0, finder)
    yield
    if finder is not None:
        sys.meta_path.remove(finder)


@pytest.mark.parametrize("entry", ENTRIES, ids=[f"{e.suite}-{e.name}" for e in ENTRIES])
def test_zoo_model_builds_and_steps_on_cpu(entry, libraries):
    """The listed model (its real config and depth cut, f32 on the CPU, batch 2, short sequences)
    runs inference and one training step: a finite loss, a gradient for every parameter, the SGD step
    moves the weights."""
    pytest.importorskip(entry.library)
    torch.manual_seed(0)
    model = zoo.build_model(entry, "cpu", train=False, dtype=torch.float32)
    assert not model.training
    with torch.no_grad():
        out = model(*zoo.model_inputs(entry, "cpu", tiny=True, dtype=torch.float32))
    shape, classes = zoo.target_shape(entry, tiny=True)
    assert out.shape == (*shape, classes) and torch.isfinite(out).all()

    step = zoo.training_step(entry, "cpu", torch.float32)
    assert step.module.training
    inputs = zoo.training_inputs(entry, "cpu", tiny=True, dtype=torch.float32)
    with torch.no_grad():  # no dropout or stochastic depth: the accuracy check compares one computation
        assert torch.equal(step.module(*inputs), step.module(*inputs))
    before = [p.detach().clone() for p in step.params]
    loss = step(*inputs)
    assert loss.dim() == 0 and torch.isfinite(loss)
    assert all(p.grad is not None for p in step.params)
    assert any(not torch.equal(a, b) for a, b in zip(before, step.params))


# ----------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser")
@pytest.mark.parametrize("name", ["zoo_timm_resnet50_train_bf16", "zoo_hf_llama_fwd_bf16"])
def test_gpu_zoo_workload(name, tmp_path):
    """One zoo workload through the CLI, one process per workload: the accuracy check ran and
    passed for eager and nvf_bookend, ATen ops were ranked, nvFuser ran."""
    if name not in REGISTRY:
        pytest.skip("timm / transformers not installed")
    import json

    out = tmp_path / "zoo.json"
    done = subprocess.run([sys.executable, "-m", "perf", "--quick", "--only", name, "--backends", "eager,nvf_bookend",
                           "--isolate", "500", "--json", str(out)], capture_output=True, text=True, timeout=600,
                          cwd=str(REPO))
    assert done.returncode == 0, done.stderr[-3000:]
    res = json.loads(out.read_text())["results"][name]
    for backend in ("eager", "nvf_bookend"):
        rec = res[backend]
        assert rec["error"] is None, rec["error"]
        assert rec["accuracy"] == "pass", rec.get("acc_detail")
        assert rec["step_ms"] > 0 and rec["kernels"] > 0 and rec["aten_ops"]
    assert res["nvf_bookend"]["nvfuser_calls"] > 0
