"""Entry point of the ``core`` command: a light argparse front that imports only what a command needs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Final

from torchplug._errors import PluginError, SettingsError
from torchplug.utilities.printable import printable

__all__ = ["EXIT_CODES", "TRAINING_COMMANDS", "main"]

EXIT_CODES: Final = """exit codes:
  0  success
  1  something is broken: a plugin is broken (its import or a hook raised, or did not finish within
     TORCHPLUG_PLUGIN_TIMEOUT) or incompatible, a listed name is broken (with --check: its class
     failed to import, or its availability check raised)
  2  usage error: unknown option, kind or name, or a bad TORCHPLUG_* variable"""

#: The training subcommands, parsed by jsonargparse in :mod:`torchplug.cli.trainer_cli` (imported only for them).
TRAINING_COMMANDS: Final = {
    "fit": "train a model, validating it as configured",
    "validate": "run one validation epoch",
    "test": "run the test set",
    "predict": "run predict_step over the predict data",
}


def _version() -> str:
    from torchplug._discovery import core_version

    return f"core {core_version()}"


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser of ``core`` (training subcommands are parsed by jsonargparse)."""
    from torchplug.cli import _checkpoint, _env, _plugins

    parser = argparse.ArgumentParser(
        prog="core",
        description="torchplug: train PyTorch models with pluggable hardware, cluster and storage backends.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=_version())
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in TRAINING_COMMANDS.items():  # listed here; run_command parses them
        commands.add_parser(name, help=f"{help_text} (core {name} --help)", add_help=False)
    _plugins.add_parser(commands)
    _checkpoint.add_parser(commands)
    _env.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``core`` command with ``argv`` (default: ``sys.argv[1:]``) and return the exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] in TRAINING_COMMANDS:
        from torchplug.cli.trainer_cli import run_command

        return run_command(args_list)
    parser = build_parser()
    args = parser.parse_args(args_list)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(args.handler(args))
    except SettingsError as exc:
        print(f"core: error: {printable(exc)}", file=sys.stderr)
        return 2
    except PluginError as exc:
        print(f"core: error: {printable(exc)}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `core plugins list | head` closed the pipe: not an error
        sys.stderr.close()
        return 0
