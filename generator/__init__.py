"""cubinforge.generator."""
