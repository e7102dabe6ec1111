"""perf.interleave: every backend compiled once, timed in rotated rounds (CPU, tiny workloads)."""

from __future__ import annotations

import statistics

import pytest
import torch

from perf import interleave


def test_rotation_puts_every_backend_first_once_per_cycle():
    names = ["a", "b", "c"]
    firsts = [interleave.rotated(names, r)[0] for r in range(3)]
    assert firsts == ["a", "b", "c"]
    assert all(sorted(interleave.rotated(names, r)) == names for r in range(7))


def test_each_backend_compiles_its_own_graph_and_gets_one_time_per_round():
    torch._dynamo.utils.counters.clear()
    res = interleave.interleaved_steps("gelu_views", ["eager", "nvf_bookend", "nvf_untrimmed"], rounds=4,
                                       batch_s=0.001, min_steps=2, max_steps=3, warmup=1, device="cpu")
    # Two compiled backends on one function: Dynamo must not serve the second from the first's cache.
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 2
    assert set(res.step_ms) == {"eager", "nvf_bookend", "nvf_untrimmed"}
    assert all(len(v) == 4 and all(t > 0 for t in v) for v in res.step_ms.values())
    summary = res.summary()
    assert summary["eager"]["ratio_median"] == 1.0
    assert summary["nvf_bookend"]["ratio_low"] <= summary["nvf_bookend"]["ratio_median"] <= summary["nvf_bookend"]["ratio_high"]
    assert "nvf_untrimmed" in interleave.table([res])
    assert set(res.steps_per_batch) == set(res.step_ms) and all(2 <= n <= 3 for n in res.steps_per_batch.values())


def test_each_backend_times_batches_of_its_own_length(monkeypatch):
    """A backend with a 10x shorter step runs ~10x more steps per batch: every batch lasts ~batch_s."""
    import time as time_module

    import pytest


    clock = [0.0]
    cost = {"eager": 0.010, "nvf_bookend": 0.001}

    def fake_step(name):
        def step():
            clock[0] += cost[name]
        return step

    monkeypatch.setattr(interleave, "backend_step", lambda backend, inst: fake_step(backend.name))
    monkeypatch.setattr(time_module, "perf_counter", lambda: clock[0])
    res = interleave.interleaved_steps("gelu_views", ["eager", "nvf_bookend"], rounds=2, batch_s=0.05,
                                       min_steps=3, max_steps=200, warmup=0, device="cpu", sync=lambda: None,
                                       profile_steps=0)
    assert res.steps_per_batch == {"eager": 5, "nvf_bookend": 50}
    assert res.step_ms["eager"] == pytest.approx([10.0, 10.0]) and res.step_ms["nvf_bookend"] == pytest.approx([1.0, 1.0])


def test_duplicate_backends_are_refused():
    import pytest

    with pytest.raises(ValueError):
        interleave.interleaved_steps("gelu_views", ["eager", "eager"], rounds=1, device="cpu")


def _result(workload, rounds):
    """An InterleavedResult from per-round step ms {backend: [..]} (enqueue = step - 0.01)."""
    res = interleave.InterleavedResult(workload=workload, reference="eager", steps_per_batch={n: 3 for n in rounds})
    for name, times in rounds.items():
        res.step_ms[name] = list(times)
        res.enqueue_ms[name] = [t - 0.01 for t in times]
    return res


def test_acceptance_reads_the_median_of_per_round_ratios():
    from perf.acceptance import FAIL, PASS, evaluate

    # Round 2 is slow for everyone (host drift): per-round ratios stay 0.8 and 0.5; the medians of
    # the times alone would not tell which backend was timed in the slow round.
    rounds = {
        "eager": [1.0, 1.0, 3.0], "inductor": [1.0, 1.0, 3.0], "inductor_ro": [0.5, 0.5, 1.5],
        "nvf_bookend": [0.8, 0.8, 2.4], "nvf_cudagraphs": [0.25, 0.25, 0.75],
    }
    doc = interleave.acceptance_document([_result("llama_train_bf16_small", rounds)])
    assert doc["workloads"]["llama_train_bf16_small"]["timing"] == "step"
    assert abs(doc["round_ratios"]["llama_train_bf16_small"]["step_ms"]["nvf_cudagraphs/inductor_ro"] - 0.5) < 1e-12
    verdicts = {v.criterion.text: v for v in evaluate(doc)}
    graphs = verdicts["CUDA graphs: geomean step time <= 0.9x inductor reduce-overhead"]
    assert abs(graphs.value - 0.5) < 1e-12 and graphs.status == PASS
    assert all(v.status == PASS for v in verdicts.values())
    # One workload above eager fails the every-workload criterion, named as the worst.
    slow = dict(rounds, nvf_bookend=[1.2, 1.1, 3.3])
    doc = interleave.acceptance_document([_result("llama_train_bf16_small", rounds), _result("gpt_train_bf16_small", slow)])
    verdicts = {v.criterion.text: v for v in evaluate(doc)}
    eager = verdicts["no graphs: every workload's step time <= eager"]
    assert eager.status == FAIL and eager.worst == "gpt_train_bf16_small" and abs(eager.value - 1.1) < 1e-12


def test_acceptance_without_a_needed_backend_is_incomplete():
    from perf.acceptance import INCOMPLETE, evaluate

    doc = interleave.acceptance_document([_result("bert_train_bf16_small", {"eager": [1.0], "nvf_bookend": [0.9]})])
    statuses = {v.criterion.reference: v.status for v in evaluate(doc)}
    assert statuses["inductor_ro"] == INCOMPLETE and statuses["inductor"] == INCOMPLETE


def test_results_of_two_runs_are_read_back_and_judged_together(tmp_path, capsys):
    """--json after each workload, --from-json a,b: the acceptance of workloads timed in two device calls."""
    rounds = {
        "eager": [1.0, 1.0, 1.0], "inductor": [1.0, 1.0, 1.0], "inductor_ro": [0.5, 0.5, 0.5],
        "nvf_bookend": [0.8, 0.8, 0.8], "nvf_cudagraphs": [0.4, 0.4, 0.4],
    }
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    interleave.write_json(str(first), [_result("llama_fwd_bf16_small", rounds)])
    interleave.write_json(str(second), [_result("bert_train_bf16_small", dict(rounds, nvf_cudagraphs=[0.6, 0.6, 0.6]))])
    loaded = interleave.read_json(str(first))[0] + interleave.read_json(str(second))[0]
    assert [r.workload for r in loaded] == ["llama_fwd_bf16_small", "bert_train_bf16_small"]
    assert loaded[1].step_ms["nvf_cudagraphs"] == [0.6, 0.6, 0.6]
    # bert_train's graphs ratio 1.2x fails the every-workload criterion: the merged verdict exits 1.
    assert interleave.main(["--from-json", f"{first},{second}", "--acceptance"]) == 1
    out = capsys.readouterr().out
    assert "llama_fwd_bf16_small" in out and "bert_train_bf16_small" in out and "FAIL" in out
    assert interleave.main(["--from-json", str(first), "--acceptance"]) == 0


def test_json_is_written_after_each_workload(tmp_path, monkeypatch):
    written = []
    monkeypatch.setattr(interleave, "interleaved_steps",
                        lambda w, names, rounds, batch_s: _result(w, {n: [1.0] for n in names}))
    monkeypatch.setattr(interleave, "write_json", lambda path, results, failed: written.append([r.workload for r in results]))
    interleave.main(["a,b", "--backends", "eager,nvf_bookend", "--json", str(tmp_path / "x.json")])
    assert written[:2] == [["a"], ["a", "b"]]


def test_a_failing_workload_is_recorded_and_the_run_goes_on(tmp_path, monkeypatch, capsys):
    """A workload whose step raises (LeViT under inductor_ro's cudagraph trees) ends its own row only:
    the next is timed, the JSON names the failure with its error, --from-json reads it back, exit 1."""
    def steps(workload, names, rounds, batch_s):
        if workload == "b":
            raise RuntimeError("accessing tensor output of CUDAGraphs that has been overwritten\nmore")
        return _result(workload, {n: [1.0] for n in names})

    monkeypatch.setattr(interleave, "interleaved_steps", steps)
    path = tmp_path / "x.json"
    assert interleave.main(["a,b,c", "--backends", "eager,nvf_bookend", "--json", str(path)]) == 1
    assert [r.workload for r in interleave.read_json(str(path))[0]] == ["a", "c"]
    assert interleave.read_json(str(path))[1] == {
        "b": "RuntimeError: accessing tensor output of CUDAGraphs that has been overwritten"}
    capsys.readouterr()
    assert interleave.main(["--from-json", str(path)]) == 1
    assert "overwritten" in capsys.readouterr().out


def _gpu_result(workload, rounds):
    """An interleaved GPU-time result from per-round GPU us {backend: [..]}; the reference is inductor."""
    return interleave.InterleavedResult(workload=workload, reference="inductor", metric="gpu_us",
                                        gpu_us={name: list(times) for name, times in rounds.items()})


def test_gpu_acceptance_reads_issue_11s_criteria_from_per_round_ratios():
    # Round 2's clocks are slow for everyone: the median of per-round ratios is 0.9, while the ratio
    # of the medians of the times (10.5 / 10.4) would put nvf_bookend over inductor.
    fast = {"inductor": [10.0, 30.0, 10.4], "nvf_bookend": [9.0, 27.0, 10.5], "nvf_untrimmed": [9.0, 27.0, 10.5],
            "eager": [20.0, 60.0, 20.0]}
    assert statistics.median(fast["nvf_bookend"]) > statistics.median(fast["inductor"])
    text, ok = interleave.gpu_acceptance([_gpu_result("layernorm_fwd_f32", fast)])
    assert ok and "acceptance: PASS" in text and "0.900x" in text
    # A block 2% over inductor and 1% over untrimmed fails both criteria, and is named.
    slow = {"inductor": [10.0, 10.0, 10.0], "nvf_bookend": [10.2, 10.2, 10.2], "nvf_untrimmed": [10.1, 10.1, 10.1],
            "eager": [20.0, 20.0, 20.0]}
    text, ok = interleave.gpu_acceptance([_gpu_result("layernorm_fwd_f32", fast), _gpu_result("softmax_fwd_f32", slow)])
    assert not ok and "softmax_fwd_f32 1.020x" in text and "softmax_fwd_f32 1.010x" in text
    lines = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| ")}
    assert "0.958x" in lines["geomean GPU time <= 0.95x inductor"]  # sqrt(0.9 * 1.02)
    assert "FAIL" in lines["geomean GPU time <= 0.95x inductor"] and "PASS" in lines["no block loses to eager"]


def test_gpu_acceptance_without_untrimmed_is_incomplete():
    text, ok = interleave.gpu_acceptance([_gpu_result("gelu_views", {"inductor": [1.0], "nvf_bookend": [0.9],
                                                                      "eager": [2.0]})])
    assert not ok and "INCOMPLETE" in text


def test_gpu_results_round_trip_through_json(tmp_path, capsys, monkeypatch):
    rounds = {"inductor": [10.0, 10.0], "nvf_bookend": [9.0, 9.5], "nvf_untrimmed": [9.5, 9.5], "eager": [20.0, 21.0]}
    path = tmp_path / "blocks.json"
    timed = []

    def fake_gpu(workload, names, rounds, calls):  # noqa: ARG001
        timed.append(workload)
        return _gpu_result(workload, {n: rounds_of[n] for n in names})

    rounds_of = rounds
    monkeypatch.setattr(interleave, "interleaved_gpu", fake_gpu)
    assert interleave.main(["layernorm_fwd_f32", "--gpu", "--backends", "inductor,nvf_bookend,nvf_untrimmed,eager",
                            "--acceptance", "--json", str(path)]) == 0
    assert timed == ["layernorm_fwd_f32"]
    (loaded,) = interleave.read_json(str(path))[0]
    assert loaded.metric == "gpu_us" and loaded.gpu_us == rounds and loaded.step_ms == {}
    assert loaded.summary()["nvf_bookend"]["ratio_median"] == 0.925
    out = capsys.readouterr().out
    assert "GPU us per call (median of rounds)" in out and "acceptance: PASS" in out
    assert interleave.main(["--from-json", str(path), "--acceptance"]) == 0


def test_workload_names_expand_patterns_and_tags():
    from perf.workloads import REGISTRY

    names = interleave.workload_names("gelu_views,layernorm_*")
    assert names[0] == "gelu_views" and "layernorm_fwd_f32" in names
    assert all(n == "gelu_views" or n.startswith("layernorm_") for n in names)
    blocks = interleave.workload_names("", ["block"])
    assert blocks and all("block" in REGISTRY[n].tags for n in blocks)
    assert len(blocks) == len(set(blocks))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_rounds_time_every_backend_on_the_device():
    res = interleave.interleaved_gpu("gelu_views", ["eager", "nvf_bookend"], rounds=2, calls=3, warmup=1,
                                     profile_steps=1)
    assert res.metric == "gpu_us" and set(res.gpu_us) == {"eager", "nvf_bookend"}
    assert all(len(v) == 2 and all(t > 0 for t in v) for v in res.gpu_us.values())
    assert res.kernels["nvf_bookend"] >= 1
    assert res.summary()["nvf_bookend"]["ratio_median"] == statistics.median(
        [a / b for a, b in zip(res.gpu_us["nvf_bookend"], res.gpu_us["eager"])])


def test_gpu_acceptance_counts_a_workload_once_and_a_missing_geomean_as_incomplete():
    rounds = {"inductor": [10.0], "nvf_bookend": [9.0], "nvf_untrimmed": [9.0], "eager": [20.0]}
    text, ok = interleave.gpu_acceptance([_gpu_result("gelu_views", rounds), _gpu_result("gelu_views", rounds)])
    assert ok and "INCOMPLETE" not in text  # one workload in two joined files
    broken = dict(rounds, nvf_bookend=[0.0])  # no positive ratio: no geomean
    text, ok = interleave.gpu_acceptance([_gpu_result("gelu_views", broken)])
    assert not ok and "INCOMPLETE" in text


def test_a_pattern_matching_nothing_is_refused():
    with pytest.raises(KeyError):
        interleave.workload_names("layernrom_*")


def test_step_and_gpu_results_print_apart_and_both_acceptances_count(tmp_path, capsys):
    steps = {"eager": [1.0], "inductor": [1.0], "inductor_ro": [0.5], "nvf_bookend": [0.8], "nvf_cudagraphs": [0.4]}
    blocks = {"inductor": [10.0], "nvf_bookend": [11.0], "nvf_untrimmed": [11.0], "eager": [20.0]}
    first, second = tmp_path / "steps.json", tmp_path / "blocks.json"
    interleave.write_json(str(first), [_result("llama_fwd_bf16_small", steps)])
    interleave.write_json(str(second), [_gpu_result("layernorm_fwd_f32", blocks)])
    # The steps pass issue #10's criteria, the block fails #11's: the joined verdict fails.
    assert interleave.main(["--from-json", f"{first},{second}", "--acceptance"]) == 1
    out = capsys.readouterr().out
    assert "step ms (median of rounds)" in out and "GPU us per call (median of rounds)" in out
    assert "acceptance: PASS" in out and "acceptance: NOT MET" in out
    with pytest.raises(ValueError):
        interleave.table(interleave.read_json(str(first))[0] + interleave.read_json(str(second))[0])


def test_compiles_run_outside_the_gpu_turn_and_warm_ups_timing_and_profiles_inside(monkeypatch):
    """With several processes per GPU (--per-gpu) the compiles overlap and the GPU work takes turns:
    each backend's first call (the compile) runs outside the turn, every later call inside one turn."""
    import contextlib

    holding = {"now": False}
    turns = []

    @contextlib.contextmanager
    def turn():
        holding["now"] = True
        turns.append("held")
        try:
            yield
        finally:
            holding["now"] = False

    calls = []

    def fake_step(name):
        def step():
            calls.append((name, holding["now"]))
        return step

    monkeypatch.setattr(interleave, "gpu_turn", turn)
    monkeypatch.setattr(interleave, "backend_step", lambda backend, inst: fake_step(backend.name))
    interleave.interleaved_steps("gelu_views", ["eager", "nvf_bookend"], rounds=2, batch_s=0.001, min_steps=1,
                                 max_steps=2, warmup=2, device="cpu", sync=lambda: None, profile_steps=0)
    assert turns == ["held"]
    for name in ("eager", "nvf_bookend"):
        mine = [inside for n, inside in calls if n == name]
        assert mine[0] is False and all(mine[1:]) and len(mine) > 3, (name, mine)


def test_per_gpu_runs_each_workload_in_its_own_process_and_joins_their_results(tmp_path):
    """`--per-gpu 2` on the CPU: two children at once (each with a turn lock), their JSON joined in
    the parent's, the workloads in the order named; a child that outlives --isolate is recorded as
    timed out and the others still count."""
    import json
    import os
    import subprocess
    import sys

    out = tmp_path / "joined.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "perf.interleave", "gelu_views,rmsnorm_fwd_f32", "--backends",
                           "eager,nvf_bookend", "--rounds", "2", "--batch-s", "0.001", "--per-gpu", "2",
                           "--json", str(out)], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert [r["workload"] for r in doc["interleaved"]] == ["gelu_views", "rmsnorm_fwd_f32"]
    assert all(len(r["step_ms"][b]) == 2 for r in doc["interleaved"] for b in ("eager", "nvf_bookend"))
    assert doc["failed"] == {}
    killed = tmp_path / "killed.json"
    proc = subprocess.run([sys.executable, "-m", "perf.interleave", "gelu_views", "--backends", "eager",
                           "--rounds", "2", "--isolate", "0.5", "--json", str(killed)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 1
    assert json.loads(killed.read_text())["failed"]["gelu_views"].startswith("[process] timed out")


def _processes_running(marker: str) -> list[int]:
    """Pids whose command line holds `marker` (Linux /proc)."""
    import os

    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker.encode() in f.read().replace(b"\0", b" "):
                        found.append(int(entry))
            except OSError:
                continue
    return found


def test_a_terminated_parent_takes_its_workload_processes_with_it(tmp_path):
    """`timeout` stops a device call's command with SIGTERM; the workload processes (each in a session
    of its own) must not outlive it and hold the GPU under the next command."""
    import os
    import signal
    import subprocess
    import sys
    import time

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    marker = "--rounds 987654 "  # the parent's and its workload process's command lines
    parent = subprocess.Popen([sys.executable, "-m", "perf.interleave", "gelu_views", "--backends", "eager",
                               "--rounds", "987654", "--batch-s", "0.001", "--per-gpu", "2", "--json",
                               str(tmp_path / "out.json")], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not [p for p in _processes_running(marker) if p != parent.pid] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [p for p in _processes_running(marker) if p != parent.pid], "the workload process never started"
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(timeout=30) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 10
        while _processes_running(marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _processes_running(marker) == []
    finally:
        parent.kill()
