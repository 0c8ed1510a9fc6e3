"""Kernel families for the tests: each wraps the real demo_scale kernel and breaks one thing."""
