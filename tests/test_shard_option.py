"""`--shard I/N` (tests/conftest.py) splits the selected tests into N disjoint shards that cover them
all, after -m has deselected its own: the GPU suite runs as `make test-gpu SHARD=1/4` ... `4/4`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

SAMPLE = '''
import pytest

@pytest.mark.parametrize("n", range(10))
def test_sample(n):
    pass

@pytest.mark.gpu
@pytest.mark.parametrize("n", range(3))
def test_marked(n):
    pass
'''


def _collected(folder, *args: str) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                         capture_output=True, text=True, cwd=folder, check=True).stdout
    return [line for line in out.splitlines() if "::" in line]


def test_shards_partition_the_selected_tests(tmp_path):
    shutil.copy(os.path.join(os.path.dirname(__file__), "conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: a GPU test\n")
    everything = _collected(tmp_path, "-m", "not gpu")
    shards = [_collected(tmp_path, "-m", "not gpu", "--shard", f"{i}/3") for i in (1, 2, 3)]
    assert len(everything) == 10 and sorted(sum(shards, [])) == sorted(everything)
    assert [len(s) for s in shards] == [4, 3, 3]  # sharded after -m: the marked tests are not counted
