"""Graph passes: each takes a GraphModule and returns it rewritten; no runtime state lives here."""
