"""cubinforge.service."""
