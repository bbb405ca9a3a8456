"""The parser of the training subcommands: jsonargparse's, with every error one short message and exit code 2.

jsonargparse reports errors in its own words and sometimes from nested parsers of its own, which
know neither the program name nor the option the user typed. :class:`Parser` rewrites the messages
whose shape is known, so that each names the option as written (``--model.hiden``), what was given,
and the valid choices; any other message is kept whole. No traceback is shown either way
(``JSONARGPARSE_DEBUG=true`` shows jsonargparse's own).
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import inspect
import os
import re
import sys
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar, Final, NoReturn

import yaml
from jsonargparse import ArgumentParser, DefaultHelpFormatter
from typing_extensions import override

__all__ = ["HelpFormatter", "Parser", "check_config_files", "config_paths"]

_CLASS_PATH_PROBLEM: Final = re.compile(r"Problem with given class_path '([^']+)':\s*(.+)")
_WRONG_BASE: Final = re.compile(r"does not correspond to a subclass of (\w+)")
_GIVEN: Final = re.compile(r"Given value: (.+)$")
_PARSER_KEY: Final = re.compile(r'^Parser key "([\w.]+)":')
_NOT_ACCEPTED: Final = re.compile(r"^Option '(\w+)' is not accepted$")
_NO_SUCH_OPTION: Final = re.compile(r"^(?:Subcommand|Group) '\w+' does not accept option '([\w.]+)'")
_UNRECOGNIZED: Final = re.compile(r"^unrecognized arguments: (.+)$")


class HelpFormatter(DefaultHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """jsonargparse's help, keeping the line breaks of descriptions and epilogs."""


class Parser(ArgumentParser):
    """An ArgumentParser whose errors are one message and a hint, exit code 2, never a traceback.

    Args:
        display_prog: The program name shown in this parser's errors (``core fit``); parsers that
            jsonargparse nests inside ours show the one of :attr:`context`.
    """

    #: The program name and the arguments being parsed, set before each parse: jsonargparse reports
    #: some errors (``--model.lr=x``) from nested parsers of its own, which know neither.
    context: ClassVar[tuple[str, Sequence[str]]] = ("core", ())

    def __init__(self, *args: Any, display_prog: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)  # --trainer.max_epoch is a typo, not --trainer.max_epochs
        super().__init__(*args, **kwargs)
        self.display_prog = display_prog
        #: The keys of the callbacks added with :meth:`add_lightning_class_args` (given to the Trainer).
        self.callback_keys: list[str] = []

    def add_lightning_class_args(
        self, lightning_class: type | tuple[type, ...], nested_key: str, subclass_mode: bool = False,
        required: bool = True,
    ) -> list[str]:  # fmt: skip
        """Add a Callback, Module or DataModule class's init arguments under ``--NESTED_KEY.*``.

        A Callback added this way (``parser.add_lightning_class_args(EarlyStopping, "early_stopping")``
        in ``add_arguments_to_parser``) is built from its options and given to the Trainer beside
        ``--trainer.callbacks``.

        Args:
            lightning_class: The class (or, with ``subclass_mode``, the base classes accepted).
            nested_key: The options' prefix (``early_stopping`` gives ``--early_stopping.patience``).
            subclass_mode: Accept any subclass, chosen with ``--NESTED_KEY=pkg.Class``.
            required: With ``subclass_mode``, whether a class must be given.

        Returns:
            The options added.
        """
        from torchplug.callbacks.callback import Callback
        from torchplug.core.datamodule import DataModule
        from torchplug.core.module import Module

        classes = lightning_class if isinstance(lightning_class, tuple) else (lightning_class,)
        if not all(isinstance(c, type) and issubclass(c, (Callback, Module, DataModule)) for c in classes):
            raise ValueError(
                f"add_lightning_class_args({lightning_class!r}, {nested_key!r}): give a Callback, Module or "
                "DataModule class."
            )
        if all(issubclass(c, Callback) for c in classes):
            self.callback_keys.append(nested_key)
        if subclass_mode:
            added: list[str] = self.add_subclass_arguments(lightning_class, nested_key, required=required)
            return added
        return list(self.add_class_arguments(classes[0], nested_key, fail_untyped=False, sub_configs=True))

    @override
    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        """Print ``PROG: error: MESSAGE`` and a help hint to stderr, and exit with code 2."""
        if os.environ.get("JSONARGPARSE_DEBUG"):
            super().error(message, ex)
        parser = getattr(ex, "subcommand_parser", None) or self
        prog, args = self.context
        prog = getattr(parser, "display_prog", None) or prog
        sys.stderr.write(f"{prog}: error: {readable(message, args, parser)}\nSee: {prog} --help\n")
        raise SystemExit(2)


def readable(message: str, args: Sequence[str], parser: Any = None) -> str:
    """Rewrite jsonargparse's ``message`` where its shape is known (kept whole otherwise).

    Args:
        message: The error as jsonargparse words it.
        args: The command-line arguments being parsed (to name options as the user wrote them).
        parser: The parser that failed, whose options are the choices of a misspelt one.
    """
    for pattern, rewrite in _REWRITES:
        match = pattern.search(message)
        if match is not None:
            return rewrite(match, message, args, parser)
    return message


def _parser_key(match: re.Match[str], message: str, args: Sequence[str], parser: Any) -> str:
    option = _option(match.group(1), args)
    given = _GIVEN.search(message)
    problem = _CLASS_PATH_PROBLEM.search(message)
    wrong_base = _WRONG_BASE.search(message)
    base = "torchplug.DataModule" if option.endswith("data") else "torchplug.Module"
    hint = (
        f"Give the dotted path of a {base} subclass (package.module.Class), importable from here: run from "
        "the folder that holds its package, or pip install it."
    )
    if problem:
        return f"{option}={problem.group(1)}: cannot import it: {problem.group(2).strip().splitlines()[0]}. {hint}"
    if wrong_base and given:
        return f"{option}={given.group(1)}: not a subclass of {wrong_base.group(1)}. {hint}"
    return f"{option}: {message[match.end() :].strip()}"


def _unknown_init_arg(match: re.Match[str], message: str, args: Sequence[str], parser: Any) -> str:
    name = match.group(1)
    option = _option(name, args)
    section = option[2:].split(".")[0] if option != f"--{name}" else _config_section(name, args)
    if section is None:
        return f"{message}. Hint: check the init_args of --model and --data."
    label = option if option != f"--{name}" else f"{section}.init_args.{name} (in a config file)"
    cls = _load(_class_paths(args).get(section))
    if cls is None:
        return f"{label}: no such init argument."
    valid = [
        p.name for p in inspect.signature(cls).parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    return (
        f"{label}: {cls.__name__} takes no argument {name!r}.{_did_you_mean(name, valid)} "
        f"Its arguments: {', '.join(valid) or '(none)'}."
    )


def _no_such_option(match: re.Match[str], message: str, args: Sequence[str], parser: Any) -> str:
    key = match.group(1)
    given = any(arg.partition("=")[0] == f"--{key}" for arg in args)
    label = f"--{key}" if given else f"{key} (in a config file)"
    return f"{label}: no such option.{_did_you_mean(f'--{key}', _options(parser))}"


def _unrecognized(match: re.Match[str], message: str, args: Sequence[str], parser: Any) -> str:
    unknown = [arg.partition("=")[0] for arg in match.group(1).split() if arg.startswith("-")]
    hints = "".join(_did_you_mean(option, _options(parser), prefix=f" {option}:") for option in unknown)
    return f"{message}.{hints}"


_REWRITES: Final = (
    (_PARSER_KEY, _parser_key),
    (_NOT_ACCEPTED, _unknown_init_arg),
    (_NO_SUCH_OPTION, _no_such_option),
    (_UNRECOGNIZED, _unrecognized),
)


def _did_you_mean(name: str, choices: Sequence[str], prefix: str = "") -> str:
    close = difflib.get_close_matches(name, choices, n=3, cutoff=0.75)
    return f"{prefix} Did you mean {' or '.join(map(repr, close))}?" if close else ""


def _options(parser: Any) -> list[str]:
    """Every long option of ``parser`` (``--trainer.max_epochs``...)."""
    actions = getattr(parser, "_actions", [])
    return [opt for action in actions for opt in action.option_strings if opt.startswith("--")]


def _option(key: str, args: Sequence[str]) -> str:
    """The option as the user wrote it: nested parsers report ``lr`` for ``--model.lr``."""
    if "." not in key:
        for arg in args:
            name = arg.partition("=")[0]
            if name.startswith("--") and (name == f"--{key}" or name.endswith(f".{key}")):
                return name
    return f"--{key}"


# -- config files -------------------------------------------------------------------------------


def config_paths(args: Sequence[str]) -> Iterator[tuple[int, str]]:
    """Each ``--config``/``-c`` file given in ``args``, with the index of the argument after it."""
    for index, arg in enumerate(args):
        if arg in ("-c", "--config") and index + 1 < len(args):
            yield index + 2, args[index + 1]
        elif arg.startswith("--config="):
            yield index + 1, arg.partition("=")[2]


def _load_yaml(path: str) -> Any:
    with open(path, encoding="utf-8") as file:
        return yaml.safe_load(file)


def check_config_files(args: Sequence[str]) -> str | None:
    """The first ``--config`` file that exists but is not a YAML mapping, as an error message (None: all fine).

    Missing files are left to jsonargparse, whose message says so.
    """
    for _, path in config_paths(args):
        if not os.path.isfile(path):
            continue
        try:
            data = _load_yaml(path)
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            detail = " ".join(str(exc).split())
            return f"--config {path}: cannot read this file as YAML: {detail}"
        if data is not None and not isinstance(data, dict):
            return (
                f"--config {path}: expected a mapping of options (trainer:, model:, data:, ...), "
                f"got a {type(data).__name__}. Hint: core fit --print_config shows the expected shape."
            )
    return None


def _config_sections(args: Sequence[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    for position, path in config_paths(args):
        try:
            data = _load_yaml(path)
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        if isinstance(data, dict):
            yield position, data


def _config_section(name: str, args: Sequence[str]) -> str | None:
    """The section (``model`` or ``data``) of a config file whose init_args hold ``name``."""
    for _, data in _config_sections(args):
        for section in ("model", "data"):
            value = data.get(section)
            if isinstance(value, dict) and name in (value.get("init_args") or {}):
                return section
    return None


def _class_paths(args: Sequence[str]) -> dict[str, str]:
    """The class path given to ``--model`` and ``--data``: by options and config files, the last one winning."""
    given: list[tuple[int, str, str]] = []
    for position, data in _config_sections(args):
        for section in ("model", "data"):
            value = data.get(section)
            path = value.get("class_path") if isinstance(value, dict) else value
            if isinstance(path, str):
                given.append((position, section, path))
    for index, arg in enumerate(args):
        name, _, value = arg.partition("=")
        for section in ("model", "data"):
            if name in (f"--{section}", f"--{section}.class_path") and value:
                given.append((index, section, value))
    return {section: path for _, section, path in sorted(given)}


def _load(path: str | None) -> Any:
    if not path or "." not in path:
        return None
    module, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name, None)
    except Exception:  # only a hint depends on it: the error is reported either way
        return None
