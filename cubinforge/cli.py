"""The `cubinforge` command: dispatches to one small module per subcommand.

To add a subcommand, write `cubinforge/commands/<name>.py` with `register(subparsers)` that
adds its parser and sets `func(args) -> int`, and list the module in COMMANDS (or list a
module with `add_subcommands(subparsers)` in EXTENSIONS).
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = ["build", "ls", "show", "explain", "verify"]
# Modules that register several subcommands at once with `add_subcommands(subparsers)`.
EXTENSIONS = ["cubinforge.commands_service"]


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cubinforge", description="Ahead-of-time attention cubins and their registry.")
    parser.add_argument("--home", help="registry folder (default: $CUBINFORGE_HOME or ./.cubinforge)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"cubinforge.commands.{name}").register(sub)
    for module in EXTENSIONS:
        try:
            ext = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            continue
        ext.add_subcommands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, KeyError, ModuleNotFoundError) as exc:  # spec errors, unknown names: say why, no traceback
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"cubinforge {args.command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
