"""``python -m torchplug_deepspeed consolidate CHECKPOINT_DIR OUTPUT_FILE``: one ordinary checkpoint file."""

from __future__ import annotations

import argparse
import sys

from torchplug import TorchplugError


def main(argv: list[str] | None = None) -> int:
    """Run the command; return its exit code (2 for a checkpoint that cannot be consolidated)."""
    parser = argparse.ArgumentParser(prog="python -m torchplug_deepspeed", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    command = commands.add_parser("consolidate", help="write a DeepSpeed checkpoint directory as one file")
    command.add_argument("checkpoint_dir", help="the directory a DeepSpeed strategy wrote")
    command.add_argument("output_file", help="the checkpoint file to write (path or fsspec URL)")
    command.add_argument("--tag", default=None, help="DeepSpeed's tag (default: the 'latest' file's)")
    args = parser.parse_args(argv)
    from torchplug_deepspeed._checkpoint import consolidate

    try:
        written = consolidate(args.checkpoint_dir, args.output_file, tag=args.tag)
    except (TorchplugError, FileNotFoundError) as exc:
        print(f"{parser.prog} consolidate: error: {exc}", file=sys.stderr)
        return 2
    print(f"consolidated {args.checkpoint_dir} -> {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
