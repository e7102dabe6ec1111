import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


def pytest_addoption(parser):
    parser.addoption("--shard", default=None, metavar="I/N",
                     help="run every N-th selected test starting at the I-th (1-based): the GPU suite takes "
                          "longer than one device call, so `make test-gpu SHARD=1/4` ... `4/4` split it")


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected theirs
def pytest_collection_modifyitems(config, items):
    """Keeps this shard's tests: round-robin over the selected tests in collection order, so a long
    file's parametrizations spread over the shards."""
    shard = config.getoption("--shard")
    if not shard:
        return
    index, count = (int(v) for v in shard.split("/"))
    if not 1 <= index <= count:
        raise ValueError(f"--shard {shard}: I must be in 1..N")
    kept = [item for position, item in enumerate(items) if position % count == index - 1]
    keep = set(kept)
    dropped = [item for item in items if item not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = kept
