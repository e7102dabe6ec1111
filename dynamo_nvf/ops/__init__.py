"""What nvFuser can run: the lowering registry, the metadata-op list and the dtype map."""
