"""requirement."""
