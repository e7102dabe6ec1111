"""The plans of perf/'s model tier and training blocks equal the recorded golden (CPU, tiny shapes).

A refactor of the pass pipeline must not change what any graph is planned into: regions, trimmed
nodes, eager nodes and rewrite notes (tests/plan_fingerprints.py says what a fingerprint holds).
When a change is meant to change plans, regenerate the golden from the repository root and review
its diff with the change:

    python3 -m tests.plan_fingerprints --update
"""

from __future__ import annotations

import json
import warnings

import pytest

from plan_fingerprints import GOLDEN, case_names, plan_case

_GOLDEN = json.loads(GOLDEN.read_text())


def test_golden_covers_every_case():
    assert sorted(_GOLDEN) == sorted(case_names())


@pytest.mark.parametrize("case", case_names())
def test_plans_equal_golden(case):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "runs without CUDA graphs: CUDA is not available", ...
        plans = plan_case(case)
    expected = _GOLDEN[case]
    assert [p["kind"] for p in plans] == [p["kind"] for p in expected]
    for got, want in zip(plans, expected):
        for key in want:
            assert got[key] == want[key], f"{case}, {want['kind']} graph: {key} differs from the golden"
    assert plans == expected
