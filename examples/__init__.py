"""Examples that train with torchplug; run them from the repository root (see README)."""
