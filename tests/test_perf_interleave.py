"""perf.interleave: every backend compiled once, timed in rotated rounds (CPU, tiny workloads)."""

from __future__ import annotations

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


def test_duplicate_backends_are_refused():
    import pytest

    with pytest.raises(ValueError):
        interleave.interleaved_steps("gelu_views", ["eager", "eager"], rounds=1, device="cpu")
