"""The parser of the training subcommands: jsonargparse's, with every error one short message and exit code 2.

jsonargparse reports errors in its own words and sometimes from nested parsers of its own, which
know neither the program name nor the option the user typed. :class:`Parser` rewrites the messages
whose shape is known, so that each names the option as written (``--model.hiden``), what was given,
and the valid choices; any other message is kept whole. No traceback is shown either way
(``JSONARGPARSE_DEBUG=true`` shows jsonargparse's own).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import inspect
import os
import re
import sys
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Final, NoReturn

import yaml
from jsonargparse import ArgumentParser, DefaultHelpFormatter
from typing_extensions import override

from torchplug.utilities.printable import printable_lines

__all__ = [
    "HelpFormatter",
    "ParseContext",
    "Parser",
    "check_config_files",
    "config_paths",
    "dropped_init_args",
    "parsing",
]

_CLASS_PATH_PROBLEM: Final = re.compile(r"Problem with given class_path '([^']+)':\s*(.+)")
_WRONG_BASE: Final = re.compile(r"does not correspond to a subclass of (\w+)")
_GIVEN: Final = re.compile(r"Given value: (.+)$")
_PARSER_KEY: Final = re.compile(r'^Parser key "([\w.]+)":')
_NOT_ACCEPTED: Final = re.compile(r"^Option '([\w.]+)' is not accepted$")
_NO_SUCH_OPTION: Final = re.compile(r"^(?:Subcommand|Group) '\w+' does not accept option '([\w.]+)'")
_UNRECOGNIZED: Final = re.compile(r"^unrecognized arguments: (.+)$")
_REQUIRED: Final = re.compile(r"^the following arguments are required: ([\w, ]+)")
_UNION: Final = re.compile(
    r"Does not validate against any of the Union subtypes\s+Subtypes: \[(?P<types>.*?)\]\s+Errors:(?P<errors>.*?)"
    r"\s+Given value type: [^\n]*\s+Given value: (?P<value>.*)\Z",
    re.S,
)
_NO_SUCH_CLASS: Final = re.compile(r"Expected a dot import path string: (\S+)")
_CLASS: Final = re.compile(r"^<class '(?:[\w.]+\.)?(\w+)'>$")
_ITERABLE: Final = re.compile(r"^(?:[\w.]+\.)?(?:Iterable|Sequence|list)\[(?:[\w.]+\.)?(\w+)\]$")
#: How a type of a union reads in an error (``max_epochs: int | None`` takes "an int or null").
_TYPE_WORDS: Final = {
    "int": "an int",
    "float": "a number",
    "bool": "true or false",
    "str": "a string",
    "NoneType": "null",
}


class HelpFormatter(DefaultHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """jsonargparse's help, keeping the line breaks of descriptions and epilogs."""


@dataclass(frozen=True, slots=True)
class ParseContext:
    """What the parse in progress is about, for the parsers jsonargparse nests inside ours, which know none of it.

    Attributes:
        prog: The program name of its errors (``train.py fit``).
        args: The command-line arguments being parsed (to name options as the user wrote them).
        root: The parser of the subcommand being parsed (or the only one): its options are the
            choices offered for a key that no parser takes.
    """

    prog: str
    args: tuple[str, ...]
    root: ArgumentParser


#: The parse in progress in this thread or task (None outside one). A context variable, not state on a
#: class: two CLIs in one process, or a CLI built while another one parses, each see their own.
_CURRENT: Final[ContextVar[ParseContext | None]] = ContextVar("torchplug_cli_parse", default=None)


@contextlib.contextmanager
def parsing(context: ParseContext) -> Iterator[None]:
    """Make ``context`` the parse in progress inside the ``with`` block (the previous one is back after it)."""
    token = _CURRENT.set(context)
    try:
        yield
    finally:
        _CURRENT.reset(token)


class Parser(ArgumentParser):
    """An ArgumentParser whose errors are one message and a hint, exit code 2, never a traceback.

    Args:
        display_prog: The program name shown in this parser's errors (``core fit``); parsers that
            jsonargparse nests inside ours show the one of the parse in progress (:func:`parsing`).
    """

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
    def parse_args(self, *args: Any, **kwargs: Any) -> Any:
        """Parse as jsonargparse does; the outermost parse becomes the parse in progress (:func:`parsing`)."""
        if _CURRENT.get() is not None:  # a CLI's parse, or one nested inside ours
            return super().parse_args(*args, **kwargs)
        given = args[0] if args else kwargs.get("args")
        argv = tuple(sys.argv[1:] if given is None else given)
        with parsing(ParseContext(self.display_prog or self.prog, argv, self)):
            return super().parse_args(*args, **kwargs)

    @override
    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        """Print ``PROG: error: MESSAGE`` and a help hint to stderr, and exit with code 2."""
        if os.environ.get("JSONARGPARSE_DEBUG"):
            super().error(message, ex)
        parser = getattr(ex, "subcommand_parser", None) or self
        context = _CURRENT.get() or ParseContext(self.display_prog or self.prog, (), self)
        prog = getattr(parser, "display_prog", None) or context.prog
        text = "\n".join(printable_lines(readable(message, context.args, parser)))  # config values are shown escaped
        sys.stderr.write(f"{prog}: error: {text}\nSee: {prog} --help\n")
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
    base = _expected_base(option)
    hint = (
        f"Give the dotted path of {base} (package.module.Class), importable from here: run from "
        "the folder that holds its package, or pip install it."
    )
    if problem:
        return f"{option}={problem.group(1)}: cannot import it: {problem.group(2).strip().splitlines()[0]}. {hint}"
    if wrong_base and given:
        return f"{option}={given.group(1)}: not a subclass of {wrong_base.group(1)}. {hint}"
    union = _UNION.search(message)
    if union:
        return _union(option, union)
    return f"{option}: {message[match.end() :].strip()}"


#: What an option's class path must name, by the option's last part (``--trainer.callbacks``: "callbacks").
_EXPECTED_BASES: Final = {
    "model": "a torchplug.Module subclass",
    "data": "a torchplug.DataModule subclass",
    "callbacks": "a torchplug.Callback subclass",
    "logger": "a torchplug.loggers.Logger subclass",
    "profiler": "a torchplug.profilers.Profiler subclass",
    "plugins": "a Precision, CheckpointIO or ClusterEnvironment subclass",
    "strategy": "a torchplug.Strategy subclass",
    "accelerator": "a torchplug.Accelerator subclass",
    "optimizer": "a torch.optim.Optimizer subclass",
    "lr_scheduler": "a torch.optim.lr_scheduler.LRScheduler subclass",
}


def _expected_base(option: str) -> str:
    """The kind of class ``option`` takes, in words (``a torchplug.Callback subclass``), else ``a class``."""
    last = option.lstrip("-").split("=")[0].rsplit(".", 1)[-1]
    return _EXPECTED_BASES.get(last, "a class")


def _union(option: str, union: re.Match[str]) -> str:
    """One line for a value that none of an option's types takes, naming the value and the types."""
    value = union["value"].strip()
    types = [_type_words(part) for part in _split_types(union["types"])]
    unknown = _NO_SUCH_CLASS.search(union["errors"])
    if unknown:
        bases = [t.removeprefix("a ").removesuffix(" class path") for t in types if t.endswith(" class path")]
        base = bases[0] if bases else "class"
        name, names = unknown.group(1), _class_names(base)
        return (
            f"{option}={value}: no {base} class is called {name!r}.{_did_you_mean(name, names)} "
            f"Hint: give its class path (package.module.Class), or the name of one of torchplug's "
            f"({', '.join(names[:4])}, ...)."
        )
    return f"{option}={value}: expected {' or '.join(dict.fromkeys(types))}."


def _split_types(text: str) -> list[str]:
    """``<class 'int'>, Iterable[a.B], ...`` split at its top-level commas."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(text[start:index].strip())
            start = index + 1
    return [*parts, text[start:].strip()]


def _type_words(part: str) -> str:
    plain = _CLASS.match(part)
    if plain:
        return _TYPE_WORDS.get(plain.group(1), f"a {plain.group(1)} class path")
    iterable = _ITERABLE.match(part)
    if iterable:
        return f"a list of {iterable.group(1)} class paths"
    return part


def _class_names(base: str) -> list[str]:
    """The names of the imported subclasses of torchplug's ``base`` (``Callback``, ``Logger``), sorted."""
    from torchplug.callbacks.callback import Callback
    from torchplug.loggers.logger import Logger

    root = {"Callback": Callback, "Logger": Logger}.get(base)
    if root is None:
        return []
    found: set[str] = set()
    pending: list[type] = [root]
    while pending:
        cls = pending.pop()
        if not cls.__name__.startswith("_") and cls is not root:
            found.add(cls.__name__)
        pending += cls.__subclasses__()
    return sorted(found)


def _unknown_init_arg(match: re.Match[str], message: str, args: Sequence[str], parser: Any) -> str:
    """``Option 'NAME' is not accepted``: an init argument that its class does not take, or a key out of place.

    Said where it was given: the command-line option (``--trainer.callbacks.monitr``, or one given
    before the class path that chooses its class), the config file entry
    (``trainer.callbacks[0].init_args.monitr``), or a config file key that no section holds.
    """
    name = match.group(1)
    given = _given(name, args)
    if given is not None:
        return _unknown_option_arg(name, given, args)
    found = _in_config_init_args(name, args)
    if found is not None:
        label, cls = found
        return (
            f"{label} (in a config file): {_not_taken(cls, name)}"
            if cls
            else f"{label} (in a config file): no such init argument."
        )
    return _no_such_key(name, args, parser)


def _missing_required(match: re.Match[str], message: str, args: Sequence[str], parser: Any) -> str:
    """``the following arguments are required: monitor``: named with the option that chose the class lacking them."""
    names = [name.strip() for name in match.group(1).split(",") if name.strip()]
    for arg in reversed(args):
        option, sep, value = arg.partition("=")
        cls = _load(value) if sep and value and option.startswith("--") else None
        if not isinstance(cls, type):
            continue
        try:
            params = inspect.signature(cls).parameters
        except (TypeError, ValueError):  # a class whose signature cannot be read: no hint from it
            continue
        if all(name in params and params[name].default is inspect.Parameter.empty for name in names):
            key = option.removesuffix("+").removesuffix(".class_path")
            return (
                f"{key}={value}: {cls.__name__}() needs {', '.join(names)}, which has no default. Hint: give it "
                f"after the class, {key}.{names[0]}=VALUE, or under the class's init_args: in a config file."
            )
    return (
        f"{', '.join(names)}: required by a class given on the command line or in a config file, and not given. "
        "Hint: give each after its class (--KEY.NAME=VALUE), or under the class's init_args: in a config file."
    )


def _given(name: str, args: Sequence[str]) -> tuple[int, str] | None:
    """The index and name of the command-line option that set init argument ``name`` (``--model.init_args.lr``)."""
    for index, arg in reversed(list(enumerate(args))):
        option = arg.partition("=")[0]
        if option.startswith("--") and "." in option and option.endswith(f".{name}"):
            return index, option
    return None


def _unknown_option_arg(name: str, given: tuple[int, str], args: Sequence[str]) -> str:
    index, option = given
    prefix = option.removesuffix(f".{name}").removesuffix(".init_args")
    chosen = _chosen_class(prefix, args)
    cls = _load(chosen[1]) if chosen else None
    if cls is None:
        return f"{option}: no such init argument. Hint: give the class first ({prefix}=package.module.Class)."
    assert chosen is not None
    if name in _init_args(cls) and chosen[0] > index:  # jsonargparse had no class for it yet
        return (
            f"{option}: given before {prefix}={chosen[1]}, which chooses the class, so no class took it. Hint: give "
            f"{prefix}={chosen[1]} first, then {option}."
        )
    return f"{option}: {_not_taken(cls, name)}"


def _chosen_class(prefix: str, args: Sequence[str]) -> tuple[int, str] | None:
    """Where the class of ``prefix`` (``--model``, ``--trainer.callbacks``) was last chosen, and its path.

    Options win; a config file's ``model:`` or ``data:`` class path counts at its ``--config`` position.
    """
    found: list[tuple[int, str]] = []
    section = prefix.removeprefix("--")
    if section in ("model", "data"):
        found += [(position, path) for position, key, path in _class_paths_given(args) if key == section]
    for index, arg in enumerate(args):
        option, sep, value = arg.partition("=")
        if sep and value and option.removesuffix("+") in (prefix, f"{prefix}.class_path"):
            found.append((index, value))
    return max(found) if found else None


def _in_config_init_args(name: str, args: Sequence[str]) -> tuple[str, type | None] | None:
    """The config file entry with init argument ``name`` (``trainer.callbacks[0].init_args.monitr``), and its class."""
    for _, data in reversed(list(_config_sections(args))):
        for path, holder in _mappings(data):
            if name not in holder or not path or path[-1] != "init_args":
                continue
            section = path[0] if len(path) == 2 else None
            parent = _at(data, path[:-1])
            class_path = parent.get("class_path") if isinstance(parent, dict) else None
            if class_path is None and section in ("model", "data"):
                class_path = _class_paths(args).get(section)
            label = "".join(f"[{key}]" if isinstance(key, int) else f".{key}" for key in (*path, name))[1:]
            return label, _load(class_path if isinstance(class_path, str) else None)
    return None


def _no_such_key(name: str, args: Sequence[str], parser: Any) -> str:
    """A key that no option takes: misspelt, or at the wrong level of a config file (``max_epochs:`` at the top)."""
    given = any(arg.partition("=")[0] == f"--{name}" for arg in args)
    label = f"--{name}" if given else f"{name} (in a config file)"
    context = _CURRENT.get()
    options = _options(context.root if context is not None else parser)
    nested = [option for option in options if option.endswith(f".{name}")] if "." not in name else []
    if nested:
        where = "" if given else " Hint: options go under their section (trainer:, model:, data:), not at the top."
        return f"{label}: no such option. Did you mean {' or '.join(map(repr, nested[:3]))}?{where}"
    maybe = _did_you_mean(f"--{name}", options)
    if not maybe and "." in name:  # a misspelt section: ``modle.hidden``
        head, _, rest = name.partition(".")
        sections = sorted({option[2:].split(".")[0] for option in options})
        close = difflib.get_close_matches(head, sections, n=1, cutoff=0.75)
        maybe = f" Did you mean '--{close[0]}.{rest}'?" if close else ""
    return f"{label}: no such option.{maybe}"


def _mappings(data: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[tuple[str | int, ...], dict[str, Any]]]:
    """Every mapping in a YAML document, with its path of keys and list indices."""
    if isinstance(data, dict):
        yield path, data
        items: Iterator[tuple[str | int, Any]] = iter(data.items())
    elif isinstance(data, list):
        items = iter(enumerate(data))
    else:
        return
    for key, value in items:
        yield from _mappings(value, (*path, key))


def _at(data: Any, path: tuple[str | int, ...]) -> Any:
    for key in path:
        data = data[key]
    return data


def _init_args(cls: Any) -> list[str]:
    try:
        parameters = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _not_taken(cls: Any, name: str) -> str:
    valid = _init_args(cls)
    return (
        f"{cls.__name__} takes no argument {name!r}.{_did_you_mean(name, valid)} "
        f"Its arguments: {', '.join(valid) or '(none)'}."
    )


def _no_such_option(match: re.Match[str], message: str, args: Sequence[str], parser: Any) -> str:
    return _no_such_key(match.group(1), args, parser)


def _unrecognized(match: re.Match[str], message: str, args: Sequence[str], parser: Any) -> str:
    unknown = [arg.partition("=")[0] for arg in match.group(1).split() if arg.startswith("-")]
    hints = "".join(_did_you_mean(option, _options(parser), prefix=f" {option}:") for option in unknown)
    return f"{message}.{hints}"


_REWRITES: Final = (
    (_PARSER_KEY, _parser_key),
    (_NOT_ACCEPTED, _unknown_init_arg),
    (_NO_SUCH_OPTION, _no_such_option),
    (_UNRECOGNIZED, _unrecognized),
    (_REQUIRED, _missing_required),
)


def _did_you_mean(name: str, choices: Sequence[str], prefix: str = "") -> str:
    close = difflib.get_close_matches(name, choices, n=3, cutoff=0.75)
    return f"{prefix} Did you mean {' or '.join(map(repr, close))}?" if close else ""


def _options(parser: Any) -> list[str]:
    """Every long option of ``parser`` (``--trainer.max_epochs``...), but jsonargparse's ``--KEY.help CLASS``."""
    actions = getattr(parser, "_actions", [])
    return [
        opt for action in actions for opt in action.option_strings if opt.startswith("--") and not opt.endswith(".help")
    ]


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


class DuplicateKeyError(yaml.YAMLError):  # type: ignore[misc]  # yaml is untyped
    """A YAML mapping gives one key twice (YAML's own loaders keep the last value without a word)."""


class _StrictLoader(yaml.SafeLoader):  # type: ignore[misc]  # yaml is untyped
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping, naming it and both lines."""

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if isinstance(key, str | int | float | bool) and key in seen:
                raise DuplicateKeyError(
                    f"the key {key!r} is given twice in one mapping (line {seen[key]} and line {line}); "
                    "YAML would keep the last value without a word. Hint: keep one of them."
                )
            if isinstance(key, str | int | float | bool):
                seen[key] = line
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


#: The sections of a config file that can only be mappings of options (the others may hold a class path).
_MAPPING_SECTIONS: Final = ("trainer",)


def _load_yaml(path: str) -> Any:
    with open(path, encoding="utf-8") as file:
        return yaml.load(file, Loader=_StrictLoader)  # a SafeLoader: plain data only


def check_config_files(args: Sequence[str]) -> str | None:
    """The first ``--config`` file that cannot be a configuration, as an error message (None: all fine).

    Refused: a file that is not YAML, one whose mappings give a key twice, one that is not a mapping
    of options, and one whose ``trainer`` section is not a mapping. Missing files are left to
    jsonargparse, whose message says so.
    """
    for _, path in config_paths(args):
        if not os.path.isfile(path):
            continue
        try:
            data = _load_yaml(path)
        except DuplicateKeyError as exc:
            return f"--config {path}: {exc}"
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            detail = " ".join(str(exc).split())
            return f"--config {path}: cannot read this file as YAML: {detail}"
        if data is not None and not isinstance(data, dict):
            return (
                f"--config {path}: expected a mapping of options (trainer:, model:, data:, ...), "
                f"got a {type(data).__name__}. Hint: core fit --print_config shows the expected shape."
            )
        problem = _section_problem(data or {})
        if problem is not None:
            return f"--config {path}: {problem}"
    return None


def _section_problem(data: dict[str, Any]) -> str | None:
    """Why a section that holds options (``trainer:``, also under a subcommand's key) is not a mapping, or None."""
    for scope in (data, *(v for k, v in data.items() if k in ("fit", "validate", "test", "predict"))):
        if not isinstance(scope, dict):
            continue
        for section in _MAPPING_SECTIONS:
            value = scope.get(section)
            if value is not None and not isinstance(value, dict):
                return (
                    f"the '{section}' section holds {value!r} ({type(value).__name__}), not a mapping of options. "
                    f"Hint: write it as '{section}:' followed by indented 'option: value' lines, for example "
                    f"'{section}: {{max_epochs: 3}}'."
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


def _class_paths_given(args: Sequence[str]) -> list[tuple[int, str, str]]:
    """Each class path given to ``--model`` and ``--data``, by options and config files, with its position."""
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
    return sorted(given)


def _class_paths(args: Sequence[str]) -> dict[str, str]:
    """The class path given to ``--model`` and ``--data``: by options and config files, the last one winning."""
    return {section: path for _, section, path in _class_paths_given(args)}


def _load(path: str | None) -> Any:
    """The class at ``path`` (``package.module.Class``, or the name of a callback or logger class), or None."""
    if not path:
        return None
    if "." not in path:
        return _by_name(path)
    module, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name, None)
    except Exception:  # only a hint depends on it: the error is reported either way
        return None


def _by_name(name: str) -> type | None:
    """The imported Callback or Logger subclass called ``name`` (``EarlyStopping``), as jsonargparse resolves it."""
    from torchplug.callbacks.callback import Callback
    from torchplug.loggers.logger import Logger

    pending: list[type] = [Callback, Logger]
    while pending:
        cls = pending.pop()
        if cls.__name__ == name:
            return cls
        pending += cls.__subclasses__()
    return None


# -- init args dropped by a later class path ----------------------------------------------------------


def dropped_init_args(args: Sequence[str]) -> list[str]:
    """A message for each init argument of ``--model`` or ``--data`` that a later class path dropped.

    jsonargparse keeps what the new class takes and drops the rest without a word when a later
    config file or option chooses another class (``--config base.yaml --model=pkg.Other``):
    ``base.yaml``'s ``hidden: 16`` then silently becomes ``Other``'s default.
    """
    messages: list[str] = []
    for section in ("model", "data"):
        current: tuple[str, str] | None = None  # the class path, and where it was given
        given: dict[str, str] = {}  # init argument -> where it was given
        for source, class_path, names in _section_events(section, args):
            if class_path is not None and current is not None and class_path != current[0]:
                kept = _kept_init_args(_load(class_path), section, given)
                for name in [n for n in given if n not in kept]:
                    messages.append(
                        f"{section}.init_args.{name} (from {given.pop(name)}) was dropped: {source} chose "
                        f"{class_path}, which takes no argument {name!r}, in place of {current[0]} (from {current[1]})."
                    )
            if class_path is not None:
                current = (class_path, source)
            given.update(dict.fromkeys(names, source))
    return messages


def _kept_init_args(cls: Any, section: str, given: dict[str, str]) -> set[str]:
    """The init arguments ``cls`` keeps of those ``given``: all when it takes ``**kwargs`` or is not a valid choice."""
    from torchplug.core.datamodule import DataModule
    from torchplug.core.module import Module

    base = Module if section == "model" else DataModule
    try:
        valid = isinstance(cls, type) and issubclass(cls, base)
        parameters = inspect.signature(cls).parameters.values() if valid else None
    except (TypeError, ValueError):
        parameters = None
    if parameters is None or any(p.kind is p.VAR_KEYWORD for p in parameters):
        return set(given)  # a class that is not a valid choice is an error of its own; **kwargs may take anything
    return {p.name for p in parameters} & set(given)


def _section_events(section: str, args: Sequence[str]) -> Iterator[tuple[str, str | None, list[str]]]:
    """In order: where ``section``'s class path or init arguments were given, the class path, the argument names."""
    configs = dict(config_paths(args))
    for index, arg in enumerate(args):
        if index in configs:
            yield from _config_events(section, configs[index])
        option, sep, value = arg.partition("=")
        if option in (f"--{section}", f"--{section}.class_path") and sep and value and not value.startswith("{"):
            yield option, value, []
        elif option.startswith(f"--{section}.") and sep:
            name = option.removeprefix(f"--{section}.").removeprefix("init_args.")
            if "." not in name:
                yield option, None, [name]
    if len(args) in configs:  # a config file given last
        yield from _config_events(section, configs[len(args)])


def _config_events(section: str, path: str) -> Iterator[tuple[str, str | None, list[str]]]:
    try:
        data = _load_yaml(path)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return
    value = data.get(section) if isinstance(data, dict) else None
    if isinstance(value, str):
        yield path, value, []
    elif isinstance(value, dict):
        init_args = value.get("init_args") if "class_path" in value or "init_args" in value else value
        class_path = value.get("class_path")
        names = [str(name) for name in init_args] if isinstance(init_args, dict) else []
        yield path, class_path if isinstance(class_path, str) else None, names
