"""nvFuser options the backend turns off in its process: NVFUSER_DISABLE gains `multidevice` before
nvfuser_direct is first imported (nvFuser reads it once), and keeps what the user set there."""

from __future__ import annotations

import os

from dynamo_nvf import nvf


def test_an_empty_setting_gains_multidevice():
    environ: dict[str, str] = {}
    nvf.disable_nvfuser_options(environ)
    assert environ["NVFUSER_DISABLE"] == "multidevice"


def test_the_users_options_are_kept_and_nothing_is_repeated():
    environ = {"NVFUSER_DISABLE": "fma,kernel_reuse"}
    nvf.disable_nvfuser_options(environ)
    assert environ["NVFUSER_DISABLE"] == "fma,kernel_reuse,multidevice"
    nvf.disable_nvfuser_options(environ)
    assert environ["NVFUSER_DISABLE"] == "fma,kernel_reuse,multidevice"
    environ = {"NVFUSER_DISABLE": "multidevice,fma"}
    nvf.disable_nvfuser_options(environ)
    assert environ["NVFUSER_DISABLE"] == "multidevice,fma"


def test_options_with_arguments_are_split_at_top_level_commas_only():
    environ = {"NVFUSER_DISABLE": "kernel_reuse(a,multidevice),fma"}
    nvf.disable_nvfuser_options(environ)
    assert environ["NVFUSER_DISABLE"] == "kernel_reuse(a,multidevice),fma,multidevice"
    environ = {"NVFUSER_DISABLE": "multidevice(x,y)"}
    nvf.disable_nvfuser_options(environ)
    assert environ["NVFUSER_DISABLE"] == "multidevice(x,y)"


def test_the_older_variable_is_carried_over_where_the_new_one_is_unset():
    """nvFuser reads PYTORCH_NVFUSER_DISABLE only where NVFUSER_DISABLE is unset: setting the new one
    must not hide the user's options in the old."""
    environ = {"PYTORCH_NVFUSER_DISABLE": "fma"}
    nvf.disable_nvfuser_options(environ)
    assert environ["NVFUSER_DISABLE"] == "fma,multidevice"
    environ = {"PYTORCH_NVFUSER_DISABLE": "fma", "NVFUSER_DISABLE": "kernel_reuse"}
    nvf.disable_nvfuser_options(environ)
    assert environ["NVFUSER_DISABLE"] == "kernel_reuse,multidevice"


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
