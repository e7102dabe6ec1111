"""nvFuser options the backend turns off in its process: NVFUSER_DISABLE gains `multidevice` before
nvfuser_direct is first imported (nvFuser reads it once), and keeps what the user set there."""

from __future__ import annotations

import os

import pytest

from dynamo_nvf import nvf


@pytest.mark.parametrize("environ, expected", [
    ({}, "multidevice"),
    ({"NVFUSER_DISABLE": "fma,kernel_reuse"}, "fma,kernel_reuse,multidevice"),  # the user's options kept
    ({"NVFUSER_DISABLE": "multidevice,fma"}, "multidevice,fma"),  # nothing repeated
    # options with arguments are split at top-level commas only
    ({"NVFUSER_DISABLE": "kernel_reuse(a,multidevice),fma"}, "kernel_reuse(a,multidevice),fma,multidevice"),
    ({"NVFUSER_DISABLE": "multidevice(x,y)"}, "multidevice(x,y)"),
    # nvFuser reads PYTORCH_NVFUSER_DISABLE only where NVFUSER_DISABLE is unset: setting the new one
    # must not hide the user's options in the old
    ({"PYTORCH_NVFUSER_DISABLE": "fma"}, "fma,multidevice"),
    ({"PYTORCH_NVFUSER_DISABLE": "fma", "NVFUSER_DISABLE": "kernel_reuse"}, "kernel_reuse,multidevice"),
])
def test_the_setting_gains_multidevice_once_keeping_the_users_options(environ, expected):
    nvf.disable_nvfuser_options(environ)
    assert environ["NVFUSER_DISABLE"] == expected
    nvf.disable_nvfuser_options(environ)  # a second call changes nothing
    assert environ["NVFUSER_DISABLE"] == expected


def test_asking_for_nvfuser_sets_it_in_the_process(monkeypatch):
    """Whether or not nvfuser_direct imports here (on the CPU it does not), the process's setting is
    made before the import is tried."""
    monkeypatch.setenv("NVFUSER_DISABLE", "fma")
    nvf._import_nvfuser.cache_clear()
    try:
        nvf.nvfuser_module()
        assert os.environ["NVFUSER_DISABLE"].split(",") == ["fma", "multidevice"]
    finally:
        nvf._import_nvfuser.cache_clear()
