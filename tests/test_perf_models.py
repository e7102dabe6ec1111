"""CPU tests of perf's model tier: the models (run eagerly on tiny shapes), the step/host measuring
functions (with CPU callables and a fake clock), the acceptance tables, shards and their join, the
step_ms gate, the CLI, and scripts/host_latency.py's helpers.  No timing is asserted.

One GPU test at the end runs the step path of perf.measure on a real model workload.
"""

from __future__ import annotations

import argparse
import copy
import gc
import importlib.util
import itertools
import json
import math
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from dynamo_nvf import nvf as nvf_env
from perf import acceptance as acc
from perf import baseline as bl
from perf import models as pm
from perf import report
from perf.__main__ import EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, _resolve_backends, main
from perf.backends import BACKENDS, DEFAULT_BACKENDS, MODEL_BACKENDS, default_backends, mark_step
from perf.measure import (
    METRIC_KEYS,
    empty_record,
    ensure_cupti_teardown,
    host_time,
    dynamo_nvf_stat,
    step_timing,
    steps_per_batch,
    summarize_steps,
)
from perf.workloads import REGISTRY, parse_shard, select, shard

REPO = Path(__file__).resolve().parents[1]
MODEL_NAMES = ("llama", "gpt", "bert", "vit", "convnext", "resnet")
TIER = [w.name for w in select(tags=["model"])]


def plain_model_workloads():
    return [w for w in REGISTRY.values() if w.timing == "step" and not ({"hf", "timm"} & w.tags)]


# ----------------------------------------------------------------------------- registry


def test_model_tier_selection():
    tier = select(tags=["model"])
    assert len(tier) == len(MODEL_NAMES) * len(pm.TIER)
    assert all(w.timing == "step" and not w.default and "model" in w.tags for w in tier)
    assert not {"hf", "timm"} & set().union(*(w.tags for w in tier)), "the library tier is opt-in by its own tag"
    assert not set(TIER) & {w.name for w in select()}, "models never join a plain run"
    assert not set(TIER) & {w.name for w in select(quick=True)}
    # --all brings the whole cross product; a model's tag brings its tier workloads
    assert {w.name for w in plain_model_workloads()} <= {w.name for w in select(all_=True, tags=["model"])}
    assert len(plain_model_workloads()) == len(MODEL_NAMES) * 8
    assert [w.name for w in select(tags=["llama"])] == [n for n in TIER if n.startswith("llama_")]
    assert [w.name for w in select(tags=["model"], quick=True)] == TIER  # --quick: fewer steps, same tier


@pytest.mark.parametrize("model", MODEL_NAMES)
def test_tier_covers_every_axis_for_every_model(model):
    ws = [w for w in select(tags=["model"]) if w.name.startswith(model + "_")]
    assert {w.kind for w in ws} == {"forward", "train"}
    assert {w.dtype for w in ws} == {torch.float32, torch.bfloat16}
    assert {b for w in ws for b in ("small", "large") if b in w.tags} == {"small", "large"}
    assert all(model in w.name and model in w.tags for w in ws)


def test_real_configs_are_small_models_with_two_batch_sizes():
    for spec in pm.MODELS.values():
        cfg = spec.config
        assert cfg.layers == 2 and 64 <= cfg.d <= 768
        assert spec.batches["small"] < spec.batches["large"]
        if cfg.seq:
            assert 128 <= cfg.seq <= 512
    llama = pm.MODELS["llama"].config
    assert llama.kv_heads < llama.heads, "grouped-query attention"


@pytest.mark.parametrize("name", [w.name for w in plain_model_workloads()])
def test_model_workloads_build_on_meta_at_real_size(name):
    wl = REGISTRY[name]
    inst = wl.instantiate("meta")
    out = inst.fn(*inst.inputs)  # shape-checks the real graph (and loss) without data
    assert out.device.type == "meta"
    if wl.kind == "train":
        assert out.dim() == 0 and out.dtype == torch.float32
    else:
        assert out.dtype == wl.dtype
        batch = next(t for t in inst.inputs if isinstance(t, torch.Tensor)).shape[0]
        assert out.shape[0] == batch


def test_training_step_gets_param_grads_and_no_input_grads():
    wl = REGISTRY["llama_train_f32_small"]
    inst = wl.instantiate("cpu", tiny=True)
    assert inst.backward and all(not t.requires_grad for t in inst.inputs)
    assert inst.inputs[-1].dtype == torch.int64  # targets last
    loss = inst.call()
    assert loss.dim() == 0 and loss.dtype == torch.float32 and math.isfinite(loss.item())
    model = inst.fn.model
    assert inst.grads and all(p.grad is not None for p in model.parameters())
    inst.call()  # grads are cleared, not accumulated, between steps
    grads = [p.grad.clone() for p in model.parameters()]
    inst.call()
    assert all(torch.equal(g, p.grad) for g, p in zip(grads, model.parameters()))


def test_model_inputs_and_weights_are_seeded():
    a = REGISTRY["bert_fwd_bf16_small"].instantiate("cpu", tiny=True)
    b = REGISTRY["bert_fwd_bf16_small"].instantiate("cpu", tiny=True)
    assert all(torch.equal(x, y) for x, y in zip(a.inputs, b.inputs))
    assert torch.equal(a.call(), b.call())


def _tiny(name: str):
    cfg = pm.MODELS[name].tiny
    torch.manual_seed(0)
    return pm.MODELS[name].module(cfg), cfg


def test_repeat_kv_and_rotate_half():
    x = torch.randn(2, 3, 5, 4)
    torch.testing.assert_close(pm.repeat_kv(x, 2), x.repeat_interleave(2, dim=1))
    assert pm.repeat_kv(x, 1) is x
    v = torch.arange(4.0)
    assert pm.rotate_half(v).tolist() == [-2.0, -3.0, 0.0, 1.0]
    cos, sin = pm.rope_cache(8, 4, 10000.0, "cpu", torch.float32)
    assert cos.shape == sin.shape == (8, 4)
    torch.testing.assert_close(cos[0], torch.ones(4))  # position 0 does not rotate
    torch.testing.assert_close(cos.pow(2) + sin.pow(2), torch.ones(8, 4))


def test_rmsnorm_normalises_in_f32():
    norm = pm.RMSNorm(16).to(torch.bfloat16)
    x = torch.randn(4, 16, dtype=torch.bfloat16) * 30
    ref = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(torch.bfloat16)
    assert torch.equal(norm(x), ref)


@pytest.mark.parametrize("name", ["llama", "gpt"])
def test_decoders_are_causal(name):
    model, cfg = _tiny(name)
    ids = torch.randint(0, cfg.vocab, (2, cfg.seq))
    changed = ids.clone()
    changed[:, -1] = (changed[:, -1] + 1) % cfg.vocab
    a, b = model(ids), model(changed)
    torch.testing.assert_close(a[:, :-1], b[:, :-1])
    assert not torch.allclose(a[:, -1], b[:, -1])


def test_bert_padding_mask_hides_padded_tokens():
    model, cfg = _tiny("bert")
    ids, mask = pm._ids_and_mask(cfg, "cpu", torch.float32)
    assert mask.dtype == torch.int64 and mask[0].all() and not mask[1].all()
    padded = (mask == 0)
    changed = torch.where(padded, (ids + 1) % cfg.vocab, ids)
    a, b = model(ids, mask), model(changed, mask)
    torch.testing.assert_close(a[~padded], b[~padded])
    assert not torch.allclose(a[padded], b[padded])


def test_convnext_channels_last_layernorm():
    ln = pm.LayerNorm2d(6)
    x = torch.randn(2, 6, 5, 5)
    ref = F.layer_norm(x.permute(0, 2, 3, 1), (6,)).permute(0, 3, 1, 2)
    torch.testing.assert_close(ln(x), ref)
    model, cfg = _tiny("convnext")
    assert model(torch.randn(2, 3, cfg.image, cfg.image)).shape == (2, cfg.classes)


def test_vit_classifies_from_the_cls_token():
    model, cfg = _tiny("vit")
    x = torch.randn(2, 3, cfg.image, cfg.image)
    assert model(x).shape == (2, cfg.classes)
    assert model.pos_embed.shape[1] == (cfg.image // cfg.patch) ** 2 + 1


def test_library_tier_names_and_tags():
    pytest.importorskip("transformers")
    hf = [w for w in REGISTRY.values() if "hf" in w.tags and "zoo" not in w.tags]  # the zoo: test_perf_zoo.py
    assert {n.split("_")[1] for n in (w.name for w in hf)} == {"llama", "gpt2", "bert"}
    assert all("model" in w.tags and w.opt_in_tags == {"hf"} and w.timing == "step" for w in hf)
    assert {w.name for w in select(tags=["hf"])} == {w.name for w in hf}


# ----------------------------------------------------------------------------- measuring


class FakeClock:
    """A clock that only moves when the measured code says so."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_host_time_arithmetic_with_a_fake_clock():
    clock, calls = FakeClock(), []
    costs = itertools.cycle([5e-6] * 10 + [9e-6] * 10)  # batch 1 costs 5 us a call, batch 2 9 us, ...

    def step():
        calls.append(1)
        clock.advance(next(costs))

    syncs = []
    t = host_time(step, batches=4, calls_per_batch=10, warmup=0, sync=lambda: syncs.append(1), clock=clock)
    assert len(calls) == 40 and len(syncs) == 8  # a synchronize before and after each batch
    assert t.per_call_us == pytest.approx(5.0) and t.median_us == pytest.approx(7.0)
    assert t.spread == pytest.approx(0.4) and (t.batches, t.calls_per_batch) == (4, 10)


def test_host_time_runs_a_cpu_callable_and_restores_gc():
    x = torch.ones(4)
    gc.enable()
    t = host_time(lambda: x + 1, batches=3, calls_per_batch=20, warmup=5)
    assert gc.isenabled()
    assert 0 < t.per_call_us <= t.median_us and math.isfinite(t.median_us)


def test_step_timing_arithmetic_with_a_fake_clock():
    clock = FakeClock()
    t = step_timing(lambda: clock.advance(1e-3), batches=3, steps=4, sync=lambda: clock.advance(0.5e-3), clock=clock)
    # each batch: 4 steps of 1 ms enqueued, then a 0.5 ms GPU tail before the synchronize returns
    assert t.enqueue_ms == pytest.approx(1.0) and t.step_ms == pytest.approx(4.5 / 4)
    assert t.steps_per_batch == 4 and t.batches == 3


def test_summarize_steps_takes_best_and_median():
    spans = [(0.0, 0.008, 0.010), (1.0, 1.004, 1.006), (2.0, 2.006, 2.020)]
    t = summarize_steps(spans, steps=2)
    assert t.step_ms == pytest.approx(3.0) and t.step_ms_median == pytest.approx(5.0)
    assert t.enqueue_ms == pytest.approx(2.0) and t.enqueue_ms_median == pytest.approx(3.0)
    with pytest.raises(ValueError):
        summarize_steps([], 3)


def test_steps_per_batch_bounds():
    assert steps_per_batch(0.002, 0.1, 3, 50) == 50
    assert steps_per_batch(0.01, 0.1, 3, 50) == 10
    assert steps_per_batch(0.5, 0.1, 3, 50) == 3
    assert steps_per_batch(0.0, 0.1, 3, 50) == 50


def test_new_record_keys():
    rec = empty_record()
    for key in ("step_ms", "step_ms_median", "enqueue_ms", "enqueue_ms_median", "kernel_ms", "nvfuser_calls",
                "host_us_median"):
        assert key in METRIC_KEYS and rec[key] is None


def test_dynamo_nvf_stat(monkeypatch):
    import dynamo_nvf

    assert dynamo_nvf_stat("nvfuser_calls") == dynamo_nvf.STATS.nvfuser_calls
    monkeypatch.delitem(sys.modules, "dynamo_nvf")
    assert dynamo_nvf_stat("nvfuser_calls") is None  # no nvf backend ran: nothing to count


def test_cupti_teardown_is_set_unless_the_caller_chose(monkeypatch):
    monkeypatch.delenv("TEARDOWN_CUPTI", raising=False)
    assert ensure_cupti_teardown() == "1"
    monkeypatch.setenv("TEARDOWN_CUPTI", "0")
    assert ensure_cupti_teardown() == "0"


def test_model_backends():
    assert MODEL_BACKENDS == ("eager", "inductor", "inductor_ro", "nvf_bookend", "nvf_cudagraphs")
    assert BACKENDS["nvf_cudagraphs"].cuda_graphs and BACKENDS["nvf_cudagraphs"].nvf
    assert BACKENDS["inductor_ro"].cuda_graphs and not BACKENDS["inductor_ro"].nvf
    assert BACKENDS["nvf_bookend"].nvf and not BACKENDS["nvf_bookend"].cuda_graphs
    assert mark_step(BACKENDS["nvf_cudagraphs"]) is torch.compiler.cudagraph_mark_step_begin
    assert mark_step(BACKENDS["eager"]) is not torch.compiler.cudagraph_mark_step_begin
    assert default_backends(False) == list(DEFAULT_BACKENDS)
    assert default_backends(True) == list(MODEL_BACKENDS)
    assert set(default_backends(True, mixed=True)) == set(DEFAULT_BACKENDS) | set(MODEL_BACKENDS)


def test_resolve_backends_for_a_model_run():
    args = argparse.Namespace(backends=None, reduce_overhead=False)
    assert _resolve_backends(args, select(tags=["model"])) == list(MODEL_BACKENDS)
    assert _resolve_backends(args, select(tags=["seed"])) == list(DEFAULT_BACKENDS)
    args.backends = "eager,nvf_cudagraphs"
    assert _resolve_backends(args, select(tags=["model"])) == ["eager", "nvf_cudagraphs"]


# ----------------------------------------------------------------------------- documents


def model_doc(step: dict, enqueue: dict | None = None, names=None, **config) -> dict:
    """A recorded model run: step[workload][backend] = step ms (None: the pair errored)."""
    results = {}
    for wl, per_backend in step.items():
        results[wl] = {}
        for b, ms in per_backend.items():
            rec = empty_record()
            if ms is None:
                rec.update(error="[run] RuntimeError: boom", errors={"run": "RuntimeError: boom"})
            else:
                enq = (enqueue or {}).get(wl, {}).get(b, ms / 2)
                rec.update(step_ms=ms, step_ms_median=ms * 1.1, enqueue_ms=enq, enqueue_ms_median=enq, kernel_ms=ms / 3,
                           kernels=40.0, nvfuser_calls=12.0 if b.startswith("nvf") else None, compile_s=1.0)
            results[wl][b] = rec
    backends = list(next(iter(step.values())))
    names = names or list(step)
    return report.make_document(
        env={"gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "hostname": "h", "git_commit": "abc"},
        config={"run_workloads": names, "measure": {"model_batches": 5}, **config},
        backends=backends,
        workloads={wl: REGISTRY[wl].meta() for wl in names},
        results=results,
        roofline=None,
        host_floor={"start_us": 4.0, "end_us": 4.1},
    )


def good_run() -> dict:
    """Every criterion passes: graphs 0.8x inductor_ro, no graphs 0.9x eager and inductor."""
    step = {wl: {"eager": 2.0, "inductor": 2.0, "inductor_ro": 1.0, "nvf_bookend": 1.8, "nvf_cudagraphs": 0.8}
            for wl in TIER}
    return model_doc(step)


def test_geomean():
    assert report.geomean([1.0, 4.0]) == pytest.approx(2.0)
    assert report.geomean([2.0, None, math.inf, 0.0]) == pytest.approx(2.0)
    assert report.geomean([]) is None


def test_step_tables_have_the_cuda_graph_ratio_column():
    doc = good_run()
    fam = next(f for f in report.FAMILIES if f.key == "step_ms")
    headers, rows = report.table_rows(doc, fam)
    assert headers[-3:] == ["nvf_bookend/eager", "nvf_bookend/inductor", "nvf_cudagraphs/inductor_ro"]
    assert rows[0][1] == "2.000 +10%" and rows[0][-3:] == ["0.90x", "0.90x", "0.80x"]
    assert doc["ratios"][TIER[0]]["step_ms"]["nvf_cudagraphs/inductor_ro"] == pytest.approx(0.8)
    gpu_fam = next(f for f in report.FAMILIES if f.key == "gpu_us")
    assert report.table_rows(doc, gpu_fam)[1] == []  # no GPU-time rows for models


def test_acceptance_passes_and_prints_both_tables():
    doc = good_run()
    assert acc.passed(doc) and [v["status"] for v in doc["acceptance"]] == [acc.PASS] * len(acc.CRITERIA)
    text = report.render_report(doc)
    assert "### Acceptance" in text and "acceptance: PASS" in text
    headers, rows = acc.ratio_table(doc)
    assert headers[1:] == ["step_ms nvf_cudagraphs/inductor_ro", "step_ms nvf_bookend/eager",
                           "step_ms nvf_bookend/inductor", "enqueue_ms nvf_bookend/inductor"]
    assert rows[-1] == ["geomean", "0.80x", "0.90x", "0.90x", "0.90x"]
    assert len(rows) == len(TIER) + 1


def test_acceptance_max_and_geomean_criteria():
    doc = good_run()
    worst = TIER[3]
    doc["results"][worst]["nvf_cudagraphs"]["step_ms"] = 1.05  # one workload 1.05x inductor_ro
    verdicts = {v.criterion.text: v for v in acc.evaluate(doc)}
    every, geo = (verdicts[c.text] for c in acc.CRITERIA[:2])
    assert every.status == acc.FAIL and every.worst == worst and every.value == pytest.approx(1.05)
    expected = math.exp((math.log(1.05) + (len(TIER) - 1) * math.log(0.8)) / len(TIER))
    assert geo.value == pytest.approx(expected) and geo.status == acc.PASS  # still <= 0.9
    assert not acc.passed(doc)


def test_enqueue_criterion_uses_host_enqueue():
    doc = good_run()
    for wl in TIER:
        doc["results"][wl]["nvf_bookend"]["enqueue_ms"] = 1.1 * doc["results"][wl]["inductor"]["enqueue_ms"]
    v = acc.evaluate(doc)[-1]
    assert v.criterion.metric == "enqueue_ms" and v.value == pytest.approx(1.1) and v.status == acc.FAIL


def test_acceptance_is_incomplete_without_all_the_evidence():
    no_graphs = model_doc({wl: {"eager": 2.0, "inductor": 2.0, "nvf_bookend": 1.0} for wl in TIER})
    statuses = [v.status for v in acc.evaluate(no_graphs)]
    assert statuses[:2] == [acc.INCOMPLETE, acc.INCOMPLETE] and statuses[2:] == [acc.PASS] * 3
    errored = good_run()
    errored["results"][TIER[0]]["nvf_cudagraphs"] = dict(empty_record(), error="[run] X", errors={"run": "X"})
    assert acc.evaluate(errored)[0].status == acc.INCOMPLETE and not acc.passed(errored)
    missing = good_run()
    del missing["results"][TIER[-1]]  # declared by the run, never measured
    v = acc.evaluate(missing)[0]
    assert v.status == acc.INCOMPLETE and (v.measured, v.expected) == (len(TIER) - 1, len(TIER))
    assert f"{TIER[-1]} / eager" in report.missing_pairs(missing)
    assert "not measured in this run" in acc.render_acceptance(missing)


def test_documents_without_models_have_no_acceptance():
    from tests.test_perf_harness import GPU, make_doc

    doc = make_doc(GPU)
    assert doc["acceptance"] == [] and acc.render_acceptance(doc) == "" and not acc.passed(doc)


def test_host_floor_drift_warns():
    doc = good_run()
    assert "WARNING" not in report.render_host_floor(doc)
    doc["host_floor"] = {"start_us": 4.0, "end_us": 9.0}
    assert "WARNING" in report.render_host_floor(doc)


# ----------------------------------------------------------------------------- shards


def test_shards_partition_the_selection():
    wls = select(tags=["model"])
    parts = [shard(wls, i, 3) for i in (1, 2, 3)]
    names = [w.name for p in parts for w in p]
    assert sorted(names) == sorted(w.name for w in wls) and len(set(names)) == len(names)
    assert [[w.name for w in shard(wls, i, 3)] for i in (1, 2, 3)] == [[w.name for w in p] for p in parts]
    loads = [sum(w.cost for w in p) for p in parts]
    assert max(loads) - min(loads) <= max(w.cost for w in wls)
    for p in parts:  # registry order kept
        assert [w.name for w in p] == [n for n in TIER if n in {w.name for w in p}]
    assert shard(wls, 1, 1) == wls


def test_parse_shard():
    assert parse_shard("2/3") == (2, 3)
    for bad in ("0/2", "3/2", "x", "1/2/3", "1-2"):
        with pytest.raises(ValueError):
            parse_shard(bad)


def split_in_shards(doc: dict, n: int = 2) -> list[dict]:
    out = []
    wls = [REGISTRY[w] for w in doc["config"]["run_workloads"]]
    for i in range(1, n + 1):
        part = copy.deepcopy(doc)
        keep = {w.name for w in shard(wls, i, n)}
        part["results"] = {k: v for k, v in part["results"].items() if k in keep}
        part["config"]["shard"] = [i, n]
        part["env"]["hostname"] = f"host{i}"
        out.append(part)
    return out


def test_join_gives_the_unsharded_tables_and_verdicts():
    whole = good_run()
    whole["results"][TIER[2]]["nvf_bookend"]["step_ms"] = 2.5  # one failing workload
    whole = report.with_acceptance(whole)
    parts = split_in_shards(whole)
    assert all(acc.render_acceptance(p).startswith("acceptance: not evaluated on one shard") for p in parts)
    joined = report.join_documents(parts, ["a.json", "b.json"])
    assert list(joined["results"]) == list(whole["results"])
    assert joined["results"] == whole["results"]
    assert [v["value"] for v in joined["acceptance"]] == pytest.approx([v["value"] for v in whole["acceptance"]])
    assert [v["status"] for v in joined["acceptance"]] == [v["status"] for v in whole["acceptance"]]
    assert joined["env"]["hostname"] == "host1, host2" and joined["config"]["shard"] is None
    assert "joined from 2 file(s)" in report.render_report(joined)
    floors = report.render_host_floor(joined).splitlines()
    assert [line.split(" (")[0] for line in floors] == ["host floor of a.json", "host floor of b.json"]
    assert "WARNING" not in "".join(floors)


def test_join_rejects_files_of_different_runs():
    a, b = split_in_shards(good_run())
    other_torch = copy.deepcopy(b)
    other_torch["env"]["torch"] = "2.13.0"
    other_backends = copy.deepcopy(b)
    other_backends["backends"] = ["eager", "inductor"]
    for bad in (other_torch, other_backends, copy.deepcopy(a)):  # the last: a workload twice
        with pytest.raises(ValueError, match="not shards of one run"):
            report.join_documents([a, bad], ["a", "b"])
    twice = copy.deepcopy(b)
    twice["config"]["shard"] = [1, 2]
    with pytest.raises(ValueError, match="same shard twice"):
        report.join_documents([a, twice], ["a", "b"])


def test_a_missing_shard_makes_the_run_incomplete():
    a, _ = split_in_shards(good_run())
    lone = copy.deepcopy(a)
    lone["config"]["shard"] = None  # e.g. a checkpoint read as a whole run
    assert not acc.passed(lone) and acc.INCOMPLETE in {v.status for v in acc.evaluate(lone)}
    assert "INCOMPLETE" in report.render_shards(lone)


# ----------------------------------------------------------------------------- baseline


def test_step_ms_gate():
    base = good_run()
    new = copy.deepcopy(base)
    wl = TIER[0]
    new["results"][wl]["nvf_bookend"]["step_ms"] = 1.8 * 1.15  # +15%, +270 us
    new["results"][TIER[1]]["nvf_bookend"]["step_ms"] = 1.8 * 1.05  # +5%: within the threshold
    cmp = bl.compare(new, base, metric="step_ms", pairs=[("nvf_bookend", "nvf_bookend")])
    status = {r.workload: r.status for r in cmp.rows}
    assert status[wl] == bl.REGRESSION and status[TIER[1]] == bl.OK and cmp.exit_code == 1
    assert "new ms" in bl.render_comparison(cmp)
    calls = []
    again = bl.compare(new, base, metric="step_ms", pairs=[("nvf_bookend", "nvf_bookend")],
                       remeasure=lambda w, b, n: calls.append((w, b)) or [1.81])
    assert calls == [(wl, "nvf_bookend")] and {r.workload: r.status for r in again.rows}[wl] == bl.NOISE


def test_step_ms_floor_and_host_defaults():
    base = model_doc({TIER[0]: {"nvf_bookend": 0.010}})
    new = model_doc({TIER[0]: {"nvf_bookend": 0.015}})  # +50% but only 5 us
    assert bl.compare(new, base, metric="step_ms").exit_code == 0
    assert bl.compare(new, base, metric="step_ms", min_delta_us=1.0).exit_code == 1
    assert bl.METRIC_DEFAULTS["host_us"][0] >= 0.25 and bl.METRIC_DEFAULTS["enqueue_ms"][0] >= 0.25
    h_base = model_doc({TIER[0]: {"nvf_bookend": 2.0}}, enqueue={TIER[0]: {"nvf_bookend": 1.0}})
    h_new = model_doc({TIER[0]: {"nvf_bookend": 2.0}}, enqueue={TIER[0]: {"nvf_bookend": 1.2}})
    assert bl.compare(h_new, h_base, metric="enqueue_ms").exit_code == 0  # +20%: under the host threshold
    h_new["results"][TIER[0]]["nvf_bookend"]["enqueue_ms"] = 1.3
    assert bl.compare(h_new, h_base, metric="enqueue_ms").exit_code == 1


# ----------------------------------------------------------------------------- CLI


def test_cli_list_model_tier(capsys):
    assert main(["--list", "--tag", "model"]) == EXIT_OK
    out = capsys.readouterr().out
    assert all(name in out for name in TIER)
    assert "gelu_views" not in out and "llama_train_bf16_large" not in out and "hf_llama" not in out
    assert "nvf_cudagraphs" in out
    assert main(["--list", "--tag", "model", "--shard", "1/2"]) == EXIT_OK


def test_cli_shard_usage_errors(capsys):
    assert main(["--list", "--tag", "model", "--shard", "3/2"]) == EXIT_USAGE
    assert main(["--tag", "model", "--shard", "1/2", "--acceptance"]) == EXIT_USAGE
    assert main(["--list", "--only", "gelu_views", "--shard", "2/2"]) == EXIT_USAGE  # an empty shard


def test_cli_report_joins_shards_and_checks_acceptance(tmp_path, capsys):
    paths = [str(report.write_document(p, tmp_path / f"s{i}.json")) for i, p in enumerate(split_in_shards(good_run()))]
    joined = tmp_path / "joined.json"
    assert main(["--report", *paths, "--json", str(joined), "--acceptance"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "### Acceptance" in out and "geomean" in out and "acceptance: PASS" in out
    assert set(report.load_document(joined)["results"]) == set(TIER)
    assert main(["--report", paths[0]]) == EXIT_OK  # one shard alone prints, without a verdict
    assert "not evaluated on one shard" in capsys.readouterr().out
    bad = good_run()
    bad["results"][TIER[0]]["nvf_cudagraphs"]["step_ms"] = 2.0
    bad_paths = [str(report.write_document(p, tmp_path / f"b{i}.json")) for i, p in enumerate(split_in_shards(bad))]
    assert main(["--report", *bad_paths]) == EXIT_OK  # printing alone never fails
    assert main(["--report", *bad_paths, "--acceptance"]) == EXIT_REGRESSION
    assert main(["--report", paths[0], paths[0]]) == EXIT_USAGE  # the same shard twice
    # a sharded run compares like any other: join the baseline's shards, compare on step time
    assert main(["--compare", *paths, "--baseline", *paths, "--metric", "step_ms"]) == EXIT_OK


def test_cli_model_run_without_cuda_exits_2(capsys):
    if torch.cuda.is_available():
        pytest.skip("checks the no-CUDA path")
    assert main(["--tag", "model", "--shard", "1/2"]) == EXIT_USAGE
    assert "no CUDA device" in capsys.readouterr().err


# ----------------------------------------------------------------------------- scripts/host_latency.py


def load_host_latency():
    spec = importlib.util.spec_from_file_location("host_latency", REPO / "scripts" / "host_latency.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_host_latency_uses_perfs_host_metric():
    mod = load_host_latency()
    assert mod.host_time is host_time


def test_host_latency_finds_regions_and_their_arguments():
    """On CPU the regions run eagerly: the runtimes and their call arguments are found; there is no
    raw nvFuser executor to compare with, and objects without the private names are tolerated."""
    import dynamo_nvf

    mod = load_host_latency()
    inst = REGISTRY["llama_fwd_bf16_small"].instantiate("cpu", tiny=True)
    torch._dynamo.reset()
    with dynamo_nvf.recording() as rec:
        compiled = torch.compile(inst.fn, backend="nvf_bookend", options={"plan_cpu_as_cuda": True})
        expected = compiled(*inst.inputs)
    runtimes = mod.region_runtimes(rec.graph_modules)
    assert len(runtimes) == sum(len(p.regions) for p in rec.plans) >= 2
    captured = mod.capture_region_args(lambda: compiled(*inst.inputs), runtimes)
    assert set(captured) == {id(r) for r in runtimes}
    for r in runtimes:
        assert all(isinstance(a, torch.Tensor) for a in captured[id(r)] if not isinstance(a, (int, float)))
        assert mod.region_label(r)
        assert mod.raw_fusion(r) == (None, None)  # eager on CPU
    assert type(runtimes[0]).__call__ is mod.region_runtime_class().__call__  # the patch is undone
    torch.testing.assert_close(compiled(*inst.inputs), expected)
    assert mod.raw_fusion(object()) == (None, None)
    torch._dynamo.reset()


def test_host_latency_cli_without_cuda():
    mod = load_host_latency()
    with pytest.raises(SystemExit):
        mod.main(["--only", "bogus"])
    if not torch.cuda.is_available():
        assert mod.main(["--only", "single"]) == 2


# ----------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser")
def test_gpu_step_metrics_of_a_model_workload(tmp_path):
    """The step path on a real model, through the CLI in a process of its own (torch.profiler sees no
    kernel in a process where nvFuser's profiler took CUPTI first): step time holds the host enqueue,
    kernels were profiled, and nvFuser ran for nvf_bookend (not for eager)."""
    import subprocess
    import sys

    out = tmp_path / "run.json"
    done = subprocess.run([sys.executable, "-m", "perf", "--quick", "--only", "llama_fwd_bf16_small",
                           "--backends", "eager,nvf_bookend", "--json", str(out)],
                          capture_output=True, text=True, timeout=400, cwd=str(Path(__file__).resolve().parents[1]))
    assert done.returncode in (0, 1), done.stderr[-3000:]
    results = json.loads(out.read_text())["results"]
    wl = "llama_fwd_bf16_small"
    for backend in ("eager", "nvf_bookend"):
        rec = results[wl][backend]
        assert rec["error"] is None, rec["error"]
        assert 0 < rec["enqueue_ms"] <= rec["step_ms"] <= rec["step_ms_median"]
        assert rec["kernels"] > 0 and rec["kernel_ms"] > 0 and rec["compile_s"] > 0
    assert results[wl]["eager"]["nvfuser_calls"] is None
    assert results[wl]["nvf_bookend"]["nvfuser_calls"] >= 1
