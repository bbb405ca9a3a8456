"""``core checkpoint inspect|verify|consolidate``: what a checkpoint holds, whether it is intact, one file of it."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Final

from torchplug.utilities.printable import printable

__all__ = ["add_parser"]

FORMATS: Final = """formats:
  file     an ordinary checkpoint file (torch.save; TorchCheckpointIO, FSDP state_dict_type='full')
  sharded  a checkpoint directory of torch.distributed.checkpoint (the 'dcp' IO, state_dict_type='sharded')
  plugins  any format an installed plugin reads (strategy-deepspeed: DeepSpeed checkpoint directories)

exit codes:
  0  success
  1  the checkpoint could not be written, or (verify) it is not as it was written: the message says why
  2  usage error, or nothing readable at PATH (missing, truncated, not a checkpoint: the message says which)"""


def add_parser(commands: Any) -> None:
    """Add ``checkpoint inspect`` and ``checkpoint consolidate`` to the ``core`` command."""
    checkpoint = commands.add_parser("checkpoint", help="inspect checkpoints, consolidate sharded ones")
    sub = checkpoint.add_subparsers(dest="checkpoint_command", metavar="SUBCOMMAND", required=True)
    inspect = sub.add_parser(
        "inspect",
        help="what a checkpoint holds: keys, tensor shapes, steps, versions",
        description="Show what a checkpoint holds, for either format, without loading a sharded one's tensors.",
        epilog=FORMATS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    inspect.add_argument("path", help="a checkpoint file or directory (local path or fsspec URL)")
    inspect.add_argument("--json", action="store_true", help="print one JSON object")
    inspect.add_argument("--tensors", action="store_true", help="list every tensor of the model (text output)")
    _weights_only_flag(inspect)
    inspect.set_defaults(handler=_inspect)
    verify = sub.add_parser(
        "verify",
        help="check a checkpoint against the digest recorded when it was written, without loading it",
        description="Check every record of a checkpoint file (or every shard of a sharded directory) against the "
        "checksums and digest recorded when it was written. Nothing is unpickled and no model is needed. Exit 0: "
        "intact; 1: damaged or cut short (the message names the file and the part); 2: nothing to check at PATH.",
        epilog=FORMATS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verify.add_argument("path", help="a checkpoint file or sharded directory (local path or fsspec URL)")
    verify.set_defaults(handler=_verify)
    consolidate = sub.add_parser(
        "consolidate",
        help="write a sharded checkpoint as one file that Module.load_from_checkpoint reads",
        description="Join every process's shards into one ordinary checkpoint file (the weights, hyperparameters, "
        "steps and versions; not the optimizer or loop state, which stay in the sharded directory). An existing "
        "OUTPUT is replaced only with --overwrite, and never when it is PATH itself.",
        epilog=FORMATS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    consolidate.add_argument("path", help="a sharded checkpoint directory (or another format a plugin reads)")
    consolidate.add_argument("output", help="the file to write (local path or fsspec URL), written atomically")
    consolidate.add_argument(
        "--overwrite", action="store_true", help="replace OUTPUT if it exists (never the checkpoint being read)"
    )
    _weights_only_flag(consolidate)
    consolidate.set_defaults(handler=_consolidate)


def _weights_only_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-weights-only",
        dest="weights_only",
        action="store_false",
        help="unpickle any object in the checkpoint (only for checkpoints you trust)",
    )


def _inspect(args: argparse.Namespace) -> int:
    from torchplug.io._formats import inspect_checkpoint

    try:
        summary = inspect_checkpoint(args.path, weights_only=args.weights_only)
    except Exception as exc:
        return _fail("inspect", exc)
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
    else:
        print(_text(summary, args.tensors))
    return 0


def _verify(args: argparse.Namespace) -> int:
    from torchplug.io._digest import IntegrityError
    from torchplug.io._formats import verify_checkpoint

    try:
        found = verify_checkpoint(args.path)
    except IntegrityError as exc:
        print(f"core checkpoint verify: FAILED: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        return _fail("verify", exc)
    print(f"{args.path}: {found.describe()}")
    return 0


def _consolidate(args: argparse.Namespace) -> int:
    from torchplug.io._formats import consolidate_checkpoint

    problem = _output_problem(args.path, args.output, args.overwrite)
    if problem is not None:
        print(f"core checkpoint consolidate: error: {printable(problem)}", file=sys.stderr)
        return 2
    try:
        written = consolidate_checkpoint(args.path, args.output, weights_only=args.weights_only)
    except Exception as exc:
        return _fail("consolidate", exc)
    print(printable(f"consolidated {args.path} -> {written}"))
    return 0


def _output_problem(path: str, output: str, overwrite: bool) -> str | None:
    """Why ``output`` must not be written: it is ``path`` itself, a directory, or (without ``overwrite``) a file."""
    from fsspec.core import url_to_fs

    in_fs, in_path = url_to_fs(path)
    out_fs, out_path = url_to_fs(output)
    if type(in_fs) is type(out_fs) and _same(in_path, out_path, local=bool(getattr(in_fs, "local_file", False))):
        return (
            f"OUTPUT={output!r} is the checkpoint being read: consolidating it in place would replace its training "
            "state (optimizer, loops, random state) with the weights alone. Hint: give another OUTPUT file."
        )
    if out_fs.isdir(out_path):
        return (
            f"OUTPUT={output!r} is a directory; consolidate writes one file. Hint: give the file's path, for "
            f"example {output.rstrip('/')}/model.ckpt."
        )
    if out_fs.exists(out_path) and not overwrite:
        return f"OUTPUT={output!r} exists already and is not replaced. Hint: give another path, or add --overwrite."
    return None


def _same(first: str, second: str, local: bool) -> bool:
    """Whether two paths of one filesystem name the same place (local ones through links, by ``realpath``)."""
    return os.path.realpath(first) == os.path.realpath(second) if local else first.rstrip("/") == second.rstrip("/")


def _fail(command: str, exc: Exception) -> int:
    from torchplug._errors import CheckpointLoadError, MisconfigurationError

    print(f"core checkpoint {command}: error: {type(exc).__name__}: {printable(exc)}", file=sys.stderr)
    return 2 if isinstance(exc, (FileNotFoundError, MisconfigurationError, CheckpointLoadError)) else 1


def _text(summary: dict[str, Any], all_tensors: bool) -> str:
    size = summary["bytes"]
    lines = [
        f"checkpoint   {summary['path']}",
        f"format       {summary['format']}"
        + (f", written by {summary['processes']} process(es)" if summary["processes"] else ""),
        f"size         {_bytes(size)}",
        f"epoch        {summary['epoch']}    global_step {summary['global_step']}",
        "versions     "
        + ", ".join(
            f"{name} {summary[key]}"
            for name, key in (
                ("torchplug", "torchplug_version"),
                ("format", "format_version"),
                ("lightning layout", "lightning_version"),
            )
            if summary[key] is not None
        ),
        f"integrity    {summary.get('integrity') or 'not checked (a plugin format)'}",
        f"keys         {', '.join(summary['keys'])}",
        f"model        {len(summary['tensors'])} tensors, {summary['parameters']:,} elements",
    ]
    tensors = list(summary["tensors"].items())
    shown = tensors if all_tensors else tensors[:8]
    lines += [f"  {name}  {info['dtype']} {tuple(info['shape'])}" for name, info in shown]
    if len(shown) < len(tensors):
        lines.append(f"  ... {len(tensors) - len(shown)} more (--tensors lists them all)")
    for i, optimizer in enumerate(summary["optimizers"]):
        lines.append(
            f"optimizer {i}  state for {optimizer['state_entries']} parameter(s), {optimizer['param_groups']} group(s)"
        )
    lines.append(f"schedulers   {summary['lr_schedulers']}")
    if summary["callbacks"]:
        lines.append(f"callbacks    {', '.join(summary['callbacks'])}")
    if summary["hyper_parameters"]:
        lines.append(f"hparams      {json.dumps(summary['hyper_parameters'], sort_keys=True)}")
    return "\n".join(printable(line) for line in lines)


def _bytes(size: int | None) -> str:
    if size is None:
        return "unknown"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit} ({size:,} bytes)"
    return f"{size} bytes"
