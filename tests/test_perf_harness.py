"""CPU-only tests of the perf/ harness: registry, tables, JSON, baseline check, CLI.

No timing happens here: measured numbers are recorded by hand and fed to the report
and baseline code, which only ever read documents.
"""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from perf import baseline as bl
from perf import report
from perf.__main__ import EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, main
from perf.backends import BACKENDS, DEFAULT_BACKENDS
from perf.measure import METRIC_KEYS, empty_record
from perf.workloads import REGISTRY, Workload, register, select, workload

REPO = Path(__file__).resolve().parents[1]

SEEDS = [
    "gelu_views",
    "gelu_views_out",
    "gelu_noviews",
    "transpose_views",
    "lone_reshape",
    "metadata_only",
    "bias_gelu_bwd",
    "view_add_view_mul_view",
]
BLOCKS = ["layernorm", "rmsnorm", "softmax", "dropout_residual_layernorm", "gpt_mlp", "gpt_attention"]
BLOCK_NAMES = [f"{b}_{k}_{d}" for b in BLOCKS for k in ("fwd", "train") for d in ("f32", "bf16")]
ALL_NAMES = SEEDS + BLOCK_NAMES + ["mlp_train_step"]

BACKS = ["eager", "inductor", "nvf_bookend", "nvf_untrimmed"]


# ----------------------------------------------------------------------------- registry


def test_every_named_workload_is_registered():
    assert set(ALL_NAMES) <= set(REGISTRY), sorted(set(ALL_NAMES) - set(REGISTRY))


def test_workload_metadata():
    assert REGISTRY["gpt_mlp_fwd_bf16"].dtype == torch.bfloat16
    assert REGISTRY["gpt_mlp_fwd_bf16"].kind == "forward"
    assert REGISTRY["gpt_mlp_train_f32"].kind == "train"
    assert REGISTRY["mlp_train_step"].kind == "train"
    for name in SEEDS:
        assert "seed" in REGISTRY[name].tags
        assert REGISTRY[name].dtype == torch.float32
    for name in BLOCK_NAMES:
        assert "block" in REGISTRY[name].tags
    # training workloads have no roofline; the elementwise seeds do; pure views move nothing
    assert all(REGISTRY[n].bytes_moved is None for n in BLOCK_NAMES if "_train_" in n)
    assert REGISTRY["gelu_views"].bytes_moved is not None
    assert REGISTRY["lone_reshape"].bytes_moved is None


def test_duplicate_registration_rejected():
    wl = REGISTRY["gelu_views"]
    with pytest.raises(ValueError):
        register(wl)


def test_decorator_registers_and_cleans_up():
    name = "_test_tmp_workload"
    try:

        @workload(name, make_inputs=lambda d, dt, tiny: (torch.ones(2, device=d, dtype=dt),), tags=("x",))
        def build(device, dtype, tiny):
            """Doubles."""
            return lambda x: x * 2

        wl = REGISTRY[name]
        assert isinstance(wl, Workload) and wl.description == "Doubles." and wl.tags == {"x"}
        inst = wl.instantiate("cpu", tiny=True)
        assert torch.equal(inst.call(), torch.full((2,), 2.0))
    finally:
        REGISTRY.pop(name, None)


def test_selection_sets():
    quick = [w.name for w in select(quick=True)]
    default = [w.name for w in select()]
    everything = [w.name for w in select(all_=True)]
    assert set(everything) == set(REGISTRY)
    assert 0 < len(quick) < len(default) <= len(everything)
    assert set(quick) <= set(default)
    assert "gelu_views" in quick and "bias_gelu_bwd" in quick
    assert [w.name for w in select(only=["gelu_*"])] == ["gelu_views", "gelu_views_out", "gelu_noviews"]
    assert [w.name for w in select(only=["softmax_fwd_f32"], quick=True)] == ["softmax_fwd_f32"]
    assert {w.name for w in select(tags=["seed"], all_=True)} == set(SEEDS)
    with pytest.raises(KeyError):
        select(only=["no_such_workload"])


def _needs_library(wl: Workload) -> None:
    """The transformers / timm tier is registered where the library is installed; skip if it does
    not import here (timm needs torchvision)."""
    for tag, module in (("hf", "transformers"), ("timm", "timm")):
        if tag in wl.tags:
            pytest.importorskip(module)


@pytest.mark.parametrize("name", sorted(n for n in REGISTRY if "zoo" not in REGISTRY[n].tags))
def test_tiny_inputs_run_under_eager_on_cpu(name):
    """Every workload but the zoo's (tests/test_perf_zoo.py builds those at their real image sizes)."""
    wl = REGISTRY[name]
    _needs_library(wl)
    inst = wl.instantiate("cpu", tiny=True)
    for t in inst.inputs:
        if isinstance(t, torch.Tensor):
            assert t.device.type == "cpu"
            assert t.numel() <= 64 * 1024, "tiny inputs must stay tiny"
            if t.is_floating_point():  # token ids stay integers
                assert t.dtype == wl.dtype
    out = inst.call()
    out2 = inst.call()  # a second call does the same work (grads were cleared)
    assert out is not None and out2 is not None
    if wl.kind == "train" and not wl.step_included:
        assert inst.backward and out.dim() == 0
        assert all(t.grad is not None for t in inst.grads)
    if wl.step_included:
        model = inst.fn.model
        assert all(p.grad is None for p in model.parameters()), "the step zeroes grads itself"


def test_train_step_updates_parameters():
    inst = REGISTRY["mlp_train_step"].instantiate("cpu", tiny=True)
    before = [p.detach().clone() for p in inst.fn.model.parameters()]
    inst.call()
    after = list(inst.fn.model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(after, before))


@pytest.mark.parametrize("name", sorted(n for n in REGISTRY if REGISTRY[n].timing == "gpu"))
def test_real_shapes_build_on_meta(name):
    """Real-size inputs and modules build without allocating (meta device).  Model workloads have
    their own test (tests/test_perf_models.py): a small batch is small on purpose."""
    wl = REGISTRY[name]
    inst = wl.instantiate("meta", tiny=False)
    tensors = [t for t in inst.inputs if isinstance(t, torch.Tensor)]
    assert tensors and all(t.device.type == "meta" for t in tensors)
    largest = max(t.numel() for t in tensors)
    if wl.bytes_moved is not None:
        assert wl.bytes_moved(inst.inputs) >= 2 * tensors[0].numel() * tensors[0].element_size()
    if wl.kind == "forward":
        out = inst.fn(*inst.inputs)  # shape-checks the real graph without data
        first = out[0] if isinstance(out, tuple) else out
        assert first.device.type == "meta"
        largest = max(largest, first.numel())  # e.g. embedding: small token ids, a large output
    assert largest >= 2**20, "real shapes should be GPU-sized"


def test_seed_shapes_match_spec():
    x = REGISTRY["gelu_views"].instantiate("meta").inputs[0]
    assert tuple(x.shape) == (8192, 3072)
    assert tuple(REGISTRY["gelu_noviews"].instantiate("meta").inputs[0].shape) == (64, 128, 3072)
    t = REGISTRY["transpose_views"].instantiate("meta")
    assert tuple(t.inputs[0].shape) == (768, 128, 64)
    assert tuple(t.fn(*t.inputs).shape) == (8192, 768)
    b = REGISTRY["bias_gelu_bwd"].instantiate("meta")
    assert b.inputs[:4] == (1.0, 2.0, 3.0, 4.0)
    assert all(tuple(v.shape) == (16, 512, 4096) for v in b.inputs[4:])
    t19, t38 = b.fn(*b.inputs)
    assert tuple(t19.shape) == (4096,) and tuple(t38.shape) == (16, 512, 4096)
    v = REGISTRY["view_add_view_mul_view"].instantiate("meta")
    assert tuple(v.fn(*v.inputs).shape) == (64, 128, 3072)


def test_seed_math_matches_reference():
    """gelu_views computes erf-GELU; view/no-view variants agree; views alias the input."""
    x = REGISTRY["gelu_views"].instantiate("cpu", tiny=True).inputs[0]
    g = REGISTRY["gelu_views"].build("cpu", torch.float32, True)(x)
    torch.testing.assert_close(g, torch.nn.functional.gelu(x))
    g2, y = REGISTRY["gelu_views_out"].build("cpu", torch.float32, True)(x)
    torch.testing.assert_close(g2, g)
    assert y.data_ptr() == x.data_ptr()
    lone = REGISTRY["lone_reshape"].build("cpu", torch.float32, True)(x)
    assert lone.data_ptr() == x.data_ptr() and lone.dim() == 3
    x3 = x.view(REGISTRY["gelu_noviews"].make_inputs("cpu", torch.float32, True)[0].shape)
    torch.testing.assert_close(REGISTRY["gelu_noviews"].build("cpu", torch.float32, True)(x3).view_as(x), g)
    vv = REGISTRY["view_add_view_mul_view"].build("cpu", torch.float32, True)(x)
    torch.testing.assert_close(vv.reshape_as(x), (x + x) * (x + x))


def test_metadata_only_launches_nothing():
    x = REGISTRY["metadata_only"].instantiate("cpu", tiny=True).inputs[0]
    outs = REGISTRY["metadata_only"].build("cpu", torch.float32, True)(x)
    assert all(o.untyped_storage().data_ptr() == x.untyped_storage().data_ptr() for o in outs)


def test_backend_registry():
    assert set(DEFAULT_BACKENDS) == set(BACKS)
    assert "inductor_ro" in BACKENDS and "inductor_ro" not in DEFAULT_BACKENDS
    fn = lambda x: x  # noqa: E731
    assert BACKENDS["eager"].wrap(fn) is fn


# ----------------------------------------------------------------------------- documents


def rec(**values) -> dict:
    r = empty_record()
    r.update(values)
    return r


def make_doc(gpu: dict[str, dict[str, float | None]], **extra_metrics) -> dict:
    """A recorded run: gpu[workload][backend] = GPU us (None = that pair errored)."""
    results = {}
    for wl, per_backend in gpu.items():
        results[wl] = {}
        for b, us in per_backend.items():
            if us is None:
                results[wl][b] = rec(error="[run] RuntimeError: boom", errors={"run": "RuntimeError: boom"})
            else:
                results[wl][b] = rec(gpu_us=us, **{k: v[wl][b] for k, v in extra_metrics.items()})
    backends = list(next(iter(gpu.values())))
    return report.make_document(
        env={"gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "date": "2026-01-01T00:00:00+00:00", "hostname": "h"},
        config={"quick": False},
        backends=backends,
        workloads={wl: {"has_bytes_moved": wl == "gelu_views"} for wl in gpu},
        results=results,
        roofline={"copy_bytes": 2 * 2**29, "copy_us": 350.0, "bytes_per_s": 2 * 2**29 / 350e-6},
    )


GPU = {
    "gelu_views": {"eager": 400.0, "inductor": 80.0, "nvf_bookend": 60.0, "nvf_untrimmed": 120.0},
    "lone_reshape": {"eager": 2.0, "inductor": 25.0, "nvf_bookend": 5.0, "nvf_untrimmed": None},
}
KERNELS = {
    "gelu_views": {"eager": 5.0, "inductor": 1.0, "nvf_bookend": 1.0, "nvf_untrimmed": 2.0},
    "lone_reshape": {"eager": 0.0, "inductor": 0.0, "nvf_bookend": 0.0, "nvf_untrimmed": None},
}


@pytest.fixture
def doc() -> dict:
    return make_doc(GPU, kernels=KERNELS)


def test_ratio_rules():
    assert report.ratio(1.0, 4.0) == 0.25
    assert report.ratio(None, 4.0) is None and report.ratio(1.0, None) is None
    assert report.ratio(0.0, 0.0) == 1.0
    assert math.isinf(report.ratio(1.0, 0.0))


def test_ratios_in_document(doc):
    r = doc["ratios"]["gelu_views"]["gpu_us"]
    assert r["nvf_bookend/eager"] == pytest.approx(60 / 400)
    assert r["nvf_bookend/inductor"] == pytest.approx(60 / 80)
    assert r["nvf_bookend/nvf_untrimmed"] == pytest.approx(0.5)
    assert doc["ratios"]["gelu_views"]["kernels"]["nvf_bookend/eager"] == pytest.approx(0.2)
    assert doc["ratios"]["lone_reshape"]["gpu_us"]["nvf_bookend/nvf_untrimmed"] is None  # errored
    assert doc["ratios"]["lone_reshape"]["kernels"]["nvf_bookend/eager"] == 1.0  # 0/0


def test_no_ratios_without_subject():
    d = make_doc({"gelu_views": {"eager": 1.0, "inductor": 2.0}})
    assert d["ratios"] == {}
    headers, _ = report.table_rows(d, report.FAMILIES[0])
    assert headers == ["workload", "eager", "inductor"]


def test_gpu_table_github_format(doc):
    fam = next(f for f in report.FAMILIES if f.key == "gpu_us")
    headers, rows = report.table_rows(doc, fam)
    assert headers == ["workload", *BACKS, "nvf_bookend/eager", "nvf_bookend/inductor", "nvf_bookend/nvf_untrimmed"]
    by_name = {r[0]: r for r in rows}
    assert by_name["gelu_views"][1:] == ["400.0", "80.0", "60.0", "120.0", "0.15x", "0.75x", "0.50x"]
    assert by_name["lone_reshape"][4] == "ERR" and by_name["lone_reshape"][-1] == "-"
    text = report.render_table(doc, fam)
    lines = text.splitlines()
    assert lines[0].startswith("### GPU time")
    table = [l for l in lines if l.startswith("|")]
    assert len(table) == 2 + len(rows)  # header, separator, rows
    assert set(table[1].replace("|", "").replace(":", "")) == {"-"}  # github separator row
    assert table[0].split("|")[1].strip() == "workload"


def test_kernel_counts_print_as_integers(doc):
    fam = next(f for f in report.FAMILIES if f.key == "kernels")
    _, rows = report.table_rows(doc, fam)
    assert rows[0][1:5] == ["5", "1", "1", "2"]
    assert rows[0][5] == "0.20x"


def test_bandwidth_table_only_for_declared_workloads():
    d = make_doc(GPU, roofline_frac={w: {b: 0.5 for b in BACKS} for w in GPU})
    fam = next(f for f in report.FAMILIES if f.key == "roofline_frac")
    _, rows = report.table_rows(d, fam)
    assert [r[0] for r in rows] == ["gelu_views"]
    assert rows[0][1] == "50.0"  # percent


def test_full_report_layout(doc):
    text = report.render_report(doc)
    header = text[: text.index("###")]  # environment header comes before the first table
    assert "NVIDIA H100 80GB HBM3" in header and "2.11.0" in header and "copy roofline" in header
    for fam in report.FAMILIES:
        if fam.key != "roofline_frac" and fam.timing in (None, "gpu"):
            assert fam.title in text
        if fam.timing == "step":  # model tables only for model workloads
            assert fam.title not in text
    assert "### Errors" in text and "lone_reshape / nvf_untrimmed [run]: RuntimeError: boom" in text


def test_a_run_of_several_processes_at_once_says_its_host_times_read_slow(doc):
    assert "CONCURRENT" not in report.render_shards(doc)
    doc["config"] = {**doc.get("config", {}), "gpus": 4, "per_gpu": 3}
    line = report.render_shards(doc)
    assert "CONCURRENT: 12 workload processes at once (3 per GPU)" in line and "host-bound" in line


def test_json_round_trip(doc, tmp_path):
    doc["results"]["gelu_views"]["eager"]["achieved_gbps"] = math.inf  # not valid strict JSON
    text = report.to_json(doc)
    back = json.loads(text)
    assert back["schema"] == report.SCHEMA
    for key in ("gpu", "torch", "date", "hostname"):
        assert key in back["env"]
    assert back["results"]["gelu_views"]["nvf_bookend"]["gpu_us"] == 60.0
    assert back["results"]["gelu_views"]["eager"]["achieved_gbps"] is None
    assert set(METRIC_KEYS) <= set(back["results"]["gelu_views"]["eager"])
    assert back["ratios"]["gelu_views"]["gpu_us"]["nvf_bookend/eager"] == pytest.approx(0.15)
    path = report.write_document(doc, tmp_path / "sub" / "run.json")
    loaded = report.load_document(path)
    assert loaded["backends"] == BACKS
    assert loaded["results"] == back["results"]


def test_load_rejects_foreign_json(tmp_path):
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"hello": 1}))
    with pytest.raises(ValueError):
        report.load_document(p)
    p.write_text("{not json")
    with pytest.raises(ValueError):
        report.load_document(p)


def test_real_env_header_is_json_serialisable():
    from perf.env import collect_env, format_env

    env = collect_env()
    back = json.loads(json.dumps(env))
    for key in ("gpu", "driver", "torch", "nvfuser_direct", "python", "date", "hostname"):
        assert key in back
    assert back["torch"] == torch.__version__
    assert "torch" in format_env(env)


def test_env_header_sets_the_backends_nvfuser_options_before_asking_nvfuser_its_version(monkeypatch):
    """The header imports nvfuser_direct for its version: the backend's options (nvf.
    DISABLED_NVFUSER_OPTIONS) are in the environment before that, as when the backend imports it."""
    from dynamo_nvf import nvf
    from perf import env as perf_env

    monkeypatch.delenv("NVFUSER_DISABLE", raising=False)
    monkeypatch.delenv("PYTORCH_NVFUSER_DISABLE", raising=False)
    seen: dict = {}

    def module_version(module, dists=()):
        seen.setdefault(module, os.environ.get("NVFUSER_DISABLE"))
        return None

    monkeypatch.setattr(perf_env, "_module_version", module_version)
    perf_env.collect_env()
    assert seen["nvfuser_direct"] == ",".join(nvf.DISABLED_NVFUSER_OPTIONS)


# ----------------------------------------------------------------------------- baseline


def slower(doc: dict, wl: str, backend: str, factor: float) -> dict:
    new = copy.deepcopy(doc)
    new["results"][wl][backend]["gpu_us"] *= factor
    return new


def statuses(cmp: bl.Comparison) -> dict[tuple[str, str], str]:
    return {(r.workload, r.backend): r.status for r in cmp.rows}


def test_identical_runs_have_no_regression(doc):
    cmp = bl.compare(copy.deepcopy(doc), doc)
    assert cmp.exit_code == 0 and not cmp.regressions
    st = statuses(cmp)
    assert st[("gelu_views", "nvf_bookend")] == bl.OK
    assert st[("lone_reshape", "nvf_untrimmed")] == bl.BOTH_ERROR
    assert len(cmp.rows) == 8


def test_within_threshold_is_not_a_regression(doc):
    cmp = bl.compare(slower(doc, "gelu_views", "nvf_bookend", 1.09), doc, threshold=0.10)
    assert cmp.exit_code == 0


def test_regression_flagged(doc):
    cmp = bl.compare(slower(doc, "gelu_views", "nvf_bookend", 1.5), doc, threshold=0.10)
    assert cmp.exit_code == 1
    assert [(r.workload, r.backend) for r in cmp.regressions] == [("gelu_views", "nvf_bookend")]
    assert cmp.regressions[0].ratio == pytest.approx(1.5)
    # a looser threshold lets it pass
    assert bl.compare(slower(doc, "gelu_views", "nvf_bookend", 1.5), doc, threshold=0.6).exit_code == 0


def test_faster_is_reported_not_flagged(doc):
    cmp = bl.compare(slower(doc, "gelu_views", "eager", 0.5), doc)
    assert statuses(cmp)[("gelu_views", "eager")] == bl.FASTER and cmp.exit_code == 0


def test_regression_that_vanishes_on_remeasure_is_noise(doc):
    calls = []

    def remeasure(wl, b, n):
        calls.append((wl, b, n))
        return [95.0, 61.0, 70.0][:n]  # min 61 <= 60 * 1.1

    cmp = bl.compare(slower(doc, "gelu_views", "nvf_bookend", 1.5), doc, remeasure=remeasure, repeats=3)
    assert calls == [("gelu_views", "nvf_bookend", 3)]  # only the suspect is re-measured
    assert cmp.exit_code == 0
    row = next(r for r in cmp.rows if r.backend == "nvf_bookend" and r.workload == "gelu_views")
    assert row.status == bl.NOISE and row.final_us == 61.0 and row.remeasured == [95.0, 61.0, 70.0]


def test_regression_that_persists_on_remeasure_is_flagged(doc):
    cmp = bl.compare(
        slower(doc, "gelu_views", "nvf_bookend", 1.5), doc, remeasure=lambda w, b, n: [80.0, 90.0], repeats=2
    )
    assert cmp.exit_code == 1 and cmp.regressions[0].final_us == 80.0


def test_remeasure_median_reduction(doc):
    new = slower(doc, "gelu_views", "nvf_bookend", 1.5)
    again = lambda w, b, n: [61.0, 90.0, 95.0]  # noqa: E731  min clears, median does not
    assert bl.compare(new, doc, remeasure=again, reduce="min").exit_code == 0
    assert bl.compare(new, doc, remeasure=again, reduce="median").exit_code == 1


def test_failed_remeasure_keeps_the_regression(doc):
    cmp = bl.compare(slower(doc, "gelu_views", "nvf_bookend", 1.5), doc, remeasure=lambda w, b, n: [])
    assert cmp.exit_code == 1 and "re-measure" in cmp.regressions[0].note


def test_new_error_is_a_regression_and_fix_is_not(doc):
    broken = copy.deepcopy(doc)
    broken["results"]["gelu_views"]["inductor"] = rec(error="[run] X", errors={"run": "X"})
    cmp = bl.compare(broken, doc)
    assert statuses(cmp)[("gelu_views", "inductor")] == bl.NEW_ERROR and cmp.exit_code == 1
    fixed = copy.deepcopy(doc)
    fixed["results"]["lone_reshape"]["nvf_untrimmed"] = rec(gpu_us=1.0)
    cmp = bl.compare(fixed, doc)
    assert statuses(cmp)[("lone_reshape", "nvf_untrimmed")] == bl.FIXED and cmp.exit_code == 0


def test_missing_baseline_pair_is_not_flagged(doc):
    base = copy.deepcopy(doc)
    del base["results"]["gelu_views"]
    cmp = bl.compare(doc, base)
    assert statuses(cmp)[("gelu_views", "nvf_bookend")] == bl.NO_BASELINE and cmp.exit_code == 0


def test_cross_backend_compare(doc):
    """A run of the untrimmed backend checked against a trimmed baseline."""
    untrimmed_run = make_doc({"gelu_views": {"nvf_untrimmed": 120.0}, "lone_reshape": {"nvf_untrimmed": 5.0}})
    pairs = bl.backend_pairs(["nvf_untrimmed"], BACKS, "nvf_untrimmed", "nvf_bookend")
    assert pairs == [("nvf_untrimmed", "nvf_bookend")]
    cmp = bl.compare(untrimmed_run, doc, pairs=pairs)
    rows = {r.workload: r for r in cmp.rows}
    assert rows["gelu_views"].baseline_backend == "nvf_bookend"
    assert rows["gelu_views"].baseline_us == 60.0 and rows["gelu_views"].status == bl.REGRESSION
    assert rows["lone_reshape"].status == bl.OK  # 5.0 vs 5.0
    assert cmp.exit_code == 1
    # the same run matched against the baseline's own untrimmed column passes
    ok = bl.compare(untrimmed_run, doc, pairs=bl.backend_pairs(["nvf_untrimmed"], BACKS, "nvf_untrimmed"))
    assert statuses(ok)[("gelu_views", "nvf_untrimmed")] == bl.OK


def test_backend_pairs_validation():
    assert bl.backend_pairs(["eager", "x"], ["eager", "y"]) == [("eager", "eager")]
    assert bl.backend_pairs(["a"], ["b"], baseline_backend="b", compare_backend="a") == [("a", "b")]
    with pytest.raises(ValueError):
        bl.backend_pairs(["a"], ["b"])
    with pytest.raises(ValueError):
        bl.backend_pairs(["a"], ["b"], compare_backend="a", baseline_backend="zzz")
    with pytest.raises(ValueError):
        bl.backend_pairs(["a"], ["b"], compare_backend="zzz", baseline_backend="b")


def test_comparison_table_and_json(doc):
    cmp = bl.compare(slower(doc, "gelu_views", "nvf_bookend", 1.5), doc, remeasure=lambda w, b, n: [59.0])
    text = bl.render_comparison(cmp)
    assert "| workload" in text and "noise" in text and "no regression" in text
    assert json.loads(json.dumps(cmp.to_json()))["regressions"] == 0
    other = copy.deepcopy(doc)
    other["env"]["gpu"] = "NVIDIA H200"
    assert any("gpu differs" in w for w in bl.compare(other, doc).warnings)


def test_negative_threshold_rejected(doc):
    with pytest.raises(ValueError):
        bl.compare(doc, doc, threshold=-0.1)


# ----------------------------------------------------------------------------- CLI


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")  # never touch a GPU from the unit tests
    return subprocess.run(
        [sys.executable, "-m", "perf", *args], cwd=REPO, capture_output=True, text=True, env=env, timeout=300
    )


def test_cli_list():
    p = run_cli("--list")
    assert p.returncode == 0, p.stderr
    for name in ALL_NAMES:
        if REGISTRY[name].default:
            assert name in p.stdout
    assert "nvf_untrimmed" in p.stdout


def test_cli_help_documents_flags():
    p = run_cli("--help")
    assert p.returncode == 0
    for flag in ("--quick", "--only", "--backends", "--json", "--baseline", "--threshold", "--compare",
                 "--baseline-backend", "--compare-backend", "--reduce-overhead", "--list"):
        assert flag in p.stdout
    assert "exit status" in p.stdout


def test_list_in_process(capsys):
    assert main(["--list", "--only", "bias_gelu_bwd"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "bias_gelu_bwd" in out and "gelu_views " not in out


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA path")
def test_run_without_cuda_exits_2(capsys):
    assert main(["--quick"]) == EXIT_USAGE
    assert "no CUDA device" in capsys.readouterr().err


def test_run_without_cuda_exits_2_subprocess():
    p = run_cli("--quick", "--only", "gelu_views")
    assert p.returncode == EXIT_USAGE
    assert "no CUDA" in p.stderr


def test_usage_errors_exit_2(doc, tmp_path, capsys):
    assert main(["--list", "--only", "nope"]) == EXIT_USAGE
    assert main(["--backends", "eager,bogus"]) == EXIT_USAGE
    assert main(["--compare", str(tmp_path / "missing.json"), "--baseline", str(tmp_path / "m2.json")]) == EXIT_USAGE
    base = report.write_document(doc, tmp_path / "base.json")
    assert main(["--compare", str(base)]) == EXIT_USAGE  # --compare without --baseline
    assert main(["--compare", str(base), "--baseline", str(base), "--baseline-backend", "nope"]) == EXIT_USAGE
    with pytest.raises(SystemExit) as exc:
        main(["--threshold", "abc"])
    assert exc.value.code == 2


def test_more_gpus_than_cuda_visible_devices_lists_is_a_usage_error(monkeypatch, capsys):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert main(["--gpus", "3", "--isolate", "10", "--only", "gelu_*"]) == EXIT_USAGE
    assert "CUDA_VISIBLE_DEVICES='2,3' lists 2" in capsys.readouterr().err


def test_cli_compare_files(doc, tmp_path):
    base = report.write_document(doc, tmp_path / "base.json")
    same = report.write_document(copy.deepcopy(doc), tmp_path / "same.json")
    worse = report.write_document(slower(doc, "gelu_views", "inductor", 2.0), tmp_path / "worse.json")

    p = run_cli("--compare", str(same), "--baseline", str(base))
    assert p.returncode == EXIT_OK, p.stdout + p.stderr
    assert "no regression" in p.stdout

    p = run_cli("--compare", str(worse), "--baseline", str(base))
    assert p.returncode == EXIT_REGRESSION, p.stdout + p.stderr
    assert "REGRESSION" in p.stdout and "gelu_views" in p.stdout

    p = run_cli("--compare", str(worse), "--baseline", str(base), "--threshold", "1.5")
    assert p.returncode == EXIT_OK


def test_cli_compare_cross_backend(doc, tmp_path):
    base = report.write_document(doc, tmp_path / "base.json")
    run = make_doc({"gelu_views": {"nvf_untrimmed": 120.0}, "lone_reshape": {"nvf_untrimmed": 5.0}})
    new = report.write_document(run, tmp_path / "untrimmed.json")
    args = ["--compare", str(new), "--baseline", str(base), "--compare-backend", "nvf_untrimmed"]
    assert main(args + ["--baseline-backend", "nvf_bookend"]) == EXIT_REGRESSION  # 120 vs trimmed 60
    assert main(args) == EXIT_OK  # vs the baseline's own untrimmed column (120)


def test_cli_report_mode(doc, tmp_path, capsys):
    path = report.write_document(doc, tmp_path / "run.json")
    assert main(["--report", str(path)]) == EXIT_OK
    out = capsys.readouterr().out
    assert "### GPU time" in out and "0.15x" in out


def test_compare_on_another_metric(doc):
    """--metric kernels / host_us: an untrimmed run that adds kernels or host cost is flagged, and
    no re-measure is attempted (only GPU time can be re-measured)."""
    run = make_doc({"gelu_views": {"nvf_untrimmed": 60.0}}, kernels={"gelu_views": {"nvf_untrimmed": 2.0}},
                   host_us={"gelu_views": {"nvf_untrimmed": 30.0}})
    base = make_doc({"gelu_views": {"nvf_bookend": 60.0}}, kernels={"gelu_views": {"nvf_bookend": 1.0}},
                    host_us={"gelu_views": {"nvf_bookend": 29.0}})
    pairs = [("nvf_untrimmed", "nvf_bookend")]
    never = lambda w, b, n: pytest.fail("re-measured")  # noqa: E731
    assert bl.compare(run, base, pairs=pairs).exit_code == 0  # same GPU time
    by_kernels = bl.compare(run, base, pairs=pairs, metric="kernels", remeasure=never)
    assert by_kernels.exit_code == 1 and by_kernels.regressions[0].ratio == 2.0
    assert "kernels per call" in bl.render_comparison(by_kernels)
    assert bl.compare(run, base, pairs=pairs, metric="host_us").exit_code == 0  # within 10%
    with pytest.raises(ValueError):
        bl.compare(run, base, metric="bogus")


def test_cli_compare_metric(doc, tmp_path):
    base = report.write_document(doc, tmp_path / "base.json")
    args = ["--compare", str(base), "--baseline", str(base), "--compare-backend", "nvf_untrimmed",
            "--baseline-backend", "nvf_bookend"]
    assert main(args + ["--metric", "kernels"]) == EXIT_REGRESSION  # 2 kernels untrimmed against 1


def test_stored_baseline_is_a_full_gpu_run_that_passes_against_itself():
    path = Path(__file__).resolve().parents[1] / "perf" / "baseline.json"
    doc = json.loads(path.read_text())
    assert doc["env"]["gpu"].startswith("NVIDIA") and len(doc["results"]) >= 20
    assert {"eager", "inductor", "nvf_bookend", "nvf_untrimmed"} <= set(report.backends_of(doc))
    assert main(["--compare", str(path), "--baseline", str(path)]) == EXIT_OK


def test_only_takes_comma_separated_names():
    names = [w.name for w in select(only=["gelu_views,lone_reshape", "transpose_*"])]
    assert names == ["gelu_views", "transpose_views", "lone_reshape"]


def test_kernel_metric_flags_one_more_kernel_and_missing_metrics_do_not_fail():
    base = make_doc({"w": {"nvf_bookend": 60.0}}, kernels={"w": {"nvf_bookend": 44.0}})
    more = make_doc({"w": {"nvf_bookend": 60.0}}, kernels={"w": {"nvf_bookend": 45.0}})
    fewer = make_doc({"w": {"nvf_bookend": 60.0}}, kernels={"w": {"nvf_bookend": 43.0}})
    assert statuses(bl.compare(more, base, metric="kernels"))[("w", "nvf_bookend")] == bl.REGRESSION
    assert statuses(bl.compare(fewer, base, metric="kernels"))[("w", "nvf_bookend")] == bl.FASTER
    no_host = bl.compare(base, make_doc({"w": {"nvf_bookend": 60.0}}, host_us={"w": {"nvf_bookend": 9.0}}),
                         metric="host_us")
    assert statuses(no_host)[("w", "nvf_bookend")] == bl.NOT_MEASURED and no_host.exit_code == 0


def test_changes_below_the_timer_floor_are_not_flagged():
    """lone_reshape launches no kernel: 1.5 -> 1.8 us is 20% but event-timer noise (an H200 run
    flagged it); 60 -> 70 us is flagged."""
    base = make_doc({"lone_reshape": {"nvf_bookend": 1.5}, "gelu_views": {"nvf_bookend": 60.0}})
    new = make_doc({"lone_reshape": {"nvf_bookend": 1.8}, "gelu_views": {"nvf_bookend": 70.0}})
    got = statuses(bl.compare(new, base))
    assert got[("lone_reshape", "nvf_bookend")] == bl.OK
    assert got[("gelu_views", "nvf_bookend")] == bl.REGRESSION
    assert statuses(bl.compare(new, base, min_delta_us=0.0))[("lone_reshape", "nvf_bookend")] == bl.REGRESSION
    again = bl.compare(new, base, remeasure=lambda w, b, n: [1.7, 1.8], min_delta_us=0.0)
    assert statuses(again)[("lone_reshape", "nvf_bookend")] == bl.REGRESSION


def test_a_lost_cuda_context_stops_the_run_after_its_pair(monkeypatch):
    """A kernel fault poisons the process's CUDA context: the run keeps what it measured and stops."""
    from dataclasses import replace as _replace

    from perf import measure

    messages: list[str] = []
    runner = measure.Runner(_replace(measure.DEFAULT_CONFIG, cupti_teardown=False), progress=messages.append)
    calls: list[tuple[str, str]] = []

    def fake_measure(wl, be):
        calls.append((wl.name, be.name))
        rec = measure.empty_record()
        if len(calls) == 2:
            rec["error"] = "[cleanup] AcceleratorError: an illegal instruction was encountered"
            rec["errors"]["cleanup"] = rec["error"]
            rec["device_lost"] = True
        return rec

    monkeypatch.setattr(runner, "measure", fake_measure)
    wls = [REGISTRY["llama_train_bf16_small"], REGISTRY["gpt_train_bf16_small"]]
    results = runner.run(wls, ["eager", "inductor"])
    assert calls == [("llama_train_bf16_small", "eager"), ("llama_train_bf16_small", "inductor")]
    assert set(results) == {"llama_train_bf16_small"} and set(results["llama_train_bf16_small"]) == {"eager", "inductor"}
    assert runner.device_lost == "llama_train_bf16_small/inductor"
    assert "CUDA context lost" in messages[-1] and "2 later pair(s)" in messages[-1]


def test_a_failing_cleanup_is_recorded_in_the_pair_not_raised(monkeypatch):
    from perf import measure

    def boom():
        raise RuntimeError("CUDA error: an illegal instruction was encountered")

    monkeypatch.setattr(measure, "_cleanup", boom)
    rec = measure.empty_record()
    measure._cleanup_into(rec)
    assert rec["device_lost"] is True
    assert "illegal instruction" in rec["errors"]["cleanup"] and rec["error"].startswith("[cleanup]")


def test_device_counts_of_a_profile_split_kernels_memops_and_time():
    """perf.measure counts a profile's CUDA events: kernels, memory ops (by activity or name), their
    time; host events are left out."""
    from types import SimpleNamespace

    from perf.measure import _device_counts

    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU

    def evt(name, device, us, activity=""):
        return SimpleNamespace(name=name, device_type=device, activity_type=activity,
                               time_range=SimpleNamespace(elapsed_us=lambda: us))

    prof = SimpleNamespace(events=lambda: [
        evt("nvfuser_pointwise_f0_c1", cuda, 10.0), evt("Memcpy DtoD (Device -> Device)", cuda, 2.0),
        evt("fill", cuda, 1.5, activity="gpu_memset"), evt("aten::add", cpu, 100.0),
        evt("ampere_bf16_gemm", cuda, 20.0)])
    assert _device_counts(prof) == (2, 2, 33.5)


def test_kernel_counts_leave_out_user_annotations():
    """A record_function range on the GPU timeline (the optimizer step's) spans the kernels inside it:
    counting it would double their time."""
    from types import SimpleNamespace

    from perf.measure import is_device_event

    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU
    assert is_device_event(SimpleNamespace(device_type=cuda, is_user_annotation=False))
    assert not is_device_event(SimpleNamespace(device_type=cuda, is_user_annotation=True))
    assert not is_device_event(SimpleNamespace(device_type=cpu, is_user_annotation=False))
