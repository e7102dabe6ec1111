"""docs/ covers the product: every Settings field has a section in docs/options.md, every declared
pass is named in docs/design.md or docs/pipeline.md, and the README stays a guide (at most 12,000
characters)."""

import dataclasses
from pathlib import Path

import pytest

from dynamo_nvf.pipeline import STAGES
from dynamo_nvf.settings import Settings

DOCS = Path(__file__).resolve().parents[1] / "docs"


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(Settings)])
def test_every_option_has_a_section(field):
    assert f"### `{field}`" in (DOCS / "options.md").read_text(), f"docs/options.md has no section for {field}"


@pytest.mark.parametrize("name", [p.name for stage in STAGES.values() for p in stage])
def test_every_pass_is_described(name):
    text = (DOCS / "design.md").read_text() + (DOCS / "pipeline.md").read_text()
    assert f"`{name}`" in text or name in text, f"no doc names the pass {name}"


def test_readme_is_a_guide():
    readme = (DOCS.parent / "README.md").read_text()
    assert len(readme) <= 12000 and readme.lstrip().startswith("# dynamo_nvf")
    assert "make demo" in readme.split("##")[0] and "make test" in readme.split("##")[0]
