"""Subcommands of the `cubinforge` CLI, one module each, plus the options they share."""

from __future__ import annotations

import argparse


def add_axis_options(parser: argparse.ArgumentParser) -> None:
    """One option per axis (`--head-dim 64,128`, `--causal 1`), named as the axis is everywhere."""
    from cubinforge.generator.spec import AXES

    parser.add_argument("--family", help="kernel family (comma list), e.g. fa3_fwd")
    for axis in AXES:
        parser.add_argument(f"--{axis.replace('_', '-')}", dest=axis, metavar="V[,V]",
                            help=f"only {axis} in these values")


def axis_filters(args: argparse.Namespace) -> dict[str, list]:
    """Typed axis values from the options that were given (arch sm90 -> sm_90a, causal 1 -> True)."""
    from cubinforge.generator.spec import AXES, parse_values

    return {axis: parse_values(axis, getattr(args, axis)) for axis in AXES if getattr(args, axis, None)}


def families(args: argparse.Namespace) -> list[str] | None:
    return [f.strip() for f in args.family.split(",") if f.strip()] if getattr(args, "family", None) else None


def open_registry(args: argparse.Namespace):
    from cubinforge.registry import Registry

    return Registry(home=args.home) if args.home else Registry()
