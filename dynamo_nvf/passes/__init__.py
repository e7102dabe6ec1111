"""Graph passes: each takes a GraphModule and returns it rewritten; no runtime state lives here."""

from __future__ import annotations

from torch.fx import GraphModule

#: gm.meta key of the notes a rewriting pass leaves for the graph's plan (explain() lists them under
#: "rewrites"); backend.plan_graph moves them into the plan.
NOTES_KEY = "nvf_rewrite_notes"


def add_note(gm: GraphModule, note: str) -> None:
    """Records what a pass rewrote, for the plan of this graph."""
    gm.meta.setdefault(NOTES_KEY, []).append(note)
