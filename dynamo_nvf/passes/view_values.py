"""Views' fake values made consistent with their inputs' before the bookend pass reads them.

Why: a view's sizes, strides and storage offset follow from its input's; a rewrite that gives a node
a new layout and leaves the views taken of it with their old values misleads every pass after it
(the bookend pass's alias rules) and lean_views, whose one-call views read the storage at the stale
strides and offset, out of bounds where the new tensor is smaller (BEiT's patch-embedding gradient
once read so: inf). Each pass is meant to recompute what it changes (`ops.metadata.views_for`);
strict mode (`Settings.strict`, the tests) raises at the pass that did not, and this pass repairs
what any pass left, with a note, so a user's program still gets eager's values.

Pure on annotations: GraphModule in, GraphModule out (only `meta["val"]` of stale views changes).
"""

from __future__ import annotations

import logging

from torch.fx import GraphModule

from dynamo_nvf.ops.metadata import stale_views
from dynamo_nvf.passes import add_note

log = logging.getLogger("dynamo_nvf")

#: The note explain() shows when views were repaired (graph plan's `rewrites`).
NOTE = "view values recomputed from their inputs' (an earlier pass left them stale): {names}"


def refresh_view_values(gm: GraphModule) -> GraphModule:
    """Gives every view whose fake value its input's does not give that value (module docstring)."""
    stale = stale_views(gm)
    for node, val in stale.items():
        node.meta["val"] = val
    if stale:
        names = ", ".join(n.name for n in list(stale)[:8]) + (", ..." if len(stale) > 8 else "")
        log.warning("dynamo_nvf: %d view value(s) were stale after planning and were recomputed: %s",
                    len(stale), names)
        add_note(gm, NOTE.format(names=names))
    return gm
