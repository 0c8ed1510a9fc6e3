"""Kernel families: one package per family, each exposing `compile_variant(config) -> KernelBuild`."""
