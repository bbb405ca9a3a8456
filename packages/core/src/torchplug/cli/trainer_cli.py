r"""``core fit | validate | test | predict`` and :class:`TrainerCLI`: train from the command line and YAML files.

Built on jsonargparse, so its options read::

    core fit --model=examples.digits.DigitsClassifier --model.lr=0.01 \
             --data=examples.digits.DigitsDataModule --trainer.accelerator=cpu --trainer.devices=2

``--trainer.*`` is built from the Trainer's signature, so it covers every Trainer argument.
Accelerators, strategies, precisions and plugins are chosen by registry name, checked against
the registries of this process (so a plugin installed after the fact is accepted by name) and
never against a fixed list of choices.

Bad input exits with code 2 and one readable message that names the option, with no traceback:
also for Trainer arguments that do not fit together. ``--resolve`` prints how the hardware
arguments were resolved (``trainer.describe()``) and exits. ``core`` finds class paths in the
current directory too, so ``--model=mypackage.MyModel`` finds ``./mypackage``; but the directory
is added to ``sys.path`` only after plugin discovery, and last, so that a file there never stands
in for a plugin or an installed library (a stray ``torch.py`` is never imported as torch).
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import importlib.util
import inspect
import os
import re
import sys
import sysconfig
import time
import traceback
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Final, NoReturn

from jsonargparse import ArgumentParser, Namespace

from torchplug._errors import (
    CheckpointLoadError,
    MisconfigurationError,
    PluginError,
    PluginLoadError,
    SettingsError,
    UnknownPluginError,
)
from torchplug._host import PluginHost, plugin_host
from torchplug.callbacks.callback import Callback
from torchplug.cli._main import TRAINING_COMMANDS
from torchplug.cli._parser import (
    HelpFormatter,
    ParseContext,
    Parser,
    check_config_files,
    dropped_init_args,
    parsing,
)
from torchplug.core.datamodule import DataModule
from torchplug.core.module import Module
from torchplug.loggers.logger import Logger
from torchplug.trainer.trainer import Trainer
from torchplug.utilities.printable import printable
from torchplug.utilities.seed import seed_everything
from torchplug.utilities.writable import unwritable

__all__ = ["EXIT_CODES", "SUBCOMMANDS", "TrainerCLI", "run_command"]

#: The subcommands, each named after the Trainer method it runs.
SUBCOMMANDS: Final = TRAINING_COMMANDS

EXIT_CODES: Final = """exit codes:
  0  success (also --help, --print_config and --resolve)
  1  the run failed: an error raised by the model, the data or a plugin while running (its traceback is shown)
  2  usage error, shown without a traceback: an unknown option, registry name or class path, a bad value,
     an unreadable config file, or Trainer arguments that do not fit together"""

#: Trainer arguments that take registry names, with the registries that hold them.
_NAMED: Final[dict[str, tuple[str, ...]]] = {
    "accelerator": ("accelerator",),
    "strategy": ("strategy",),
    "precision": ("precision",),
    "plugins": ("precision", "checkpoint_io", "cluster_environment"),
    "logger": ("logger",),
}

#: Classes imported up front so that their short names work: ``--trainer.callbacks+=EarlyStopping``.
_SHORT_NAMES: Final = (
    "torchplug.callbacks.model_checkpoint",
    "torchplug.callbacks.early_stopping",
    "torchplug.callbacks.lr_monitor",
    "torchplug.callbacks.progress",
    "torchplug.callbacks.tqdm_progress",
    "torchplug.callbacks.rich_progress",
    "torchplug.callbacks.model_summary",
    "torchplug.callbacks.rich_model_summary",
    "torchplug.callbacks.gradient_accumulation_scheduler",
    "torchplug.callbacks.stochastic_weight_avg",
    "torchplug.callbacks.weight_averaging",
    "torchplug.callbacks.timer",
    "torchplug.callbacks.lambda_function",
    "torchplug.callbacks.prediction_writer",
    "torchplug.callbacks.finetuning",
    "torchplug.callbacks.on_exception_checkpoint",
    "torchplug.callbacks.device_stats_monitor",
    "torchplug.callbacks.throughput_monitor",
    "torchplug.callbacks.pruning",
    "torchplug.callbacks.spike",
    "torchplug.callbacks.lr_finder",
    "torchplug.callbacks.batch_size_finder",
    "torchplug.loggers.csv_logs",
    "torchplug.loggers.tensorboard",
)

#: What ``core fit --tune`` can tune.
_TUNE_CHOICES: Final = ("lr", "batch_size")

#: The words ``--ckpt_path`` takes besides a path (``Trainer.fit(ckpt_path=...)`` resolves them).
_CKPT_WORDS: Final = ("last", "best", "auto")

#: Lightning's ``ckpt_path`` words that name nothing here, with what to give instead.
_LIGHTNING_CKPT_WORDS: Final = {
    "hpc": "Lightning's SLURM checkpoint (hpc_ckpt_*.ckpt), which torchplug does not write. Hint: --ckpt_path=auto "
    "resumes from the newest checkpoint, the cluster environment's preemption checkpoint included.",
    "registry": "Lightning's cloud model registry, which torchplug does not provide. Hint: give the path of a .ckpt "
    "file, or 'last', 'best' or 'auto'.",
}

#: ``name=`` in a Trainer error message: the argument it is about.
_ARGUMENT: Final = re.compile(r"\b([a-z_]+)=")


#: The keys of ``save_config_kwargs``, with their defaults.
_SAVE_CONFIG_DEFAULTS: Final[dict[str, Any]] = {
    "config_filename": "config.yaml",
    "overwrite": False,
    "multifile": False,
}


class _SaveConfig(Callback):
    """Writes the run's full configuration into the log directory (global rank 0, at the first run's setup).

    Args:
        text: The configuration, as YAML.
        config_filename: The file's name in the log directory.
        overwrite: Replace a file already there (else that is an error: it belongs to an earlier run).
    """

    def __init__(self, text: str, config_filename: str = "config.yaml", overwrite: bool = False) -> None:
        self.text = text
        self.config_filename = config_filename
        self.overwrite = overwrite
        self.already_saved = False

    def setup(self, trainer: Trainer, module: Module, stage: str) -> None:
        """Write the file when the first run starts (``fit`` for ``core fit``; any with ``run=False``)."""
        if self.already_saved or not trainer.is_global_zero or trainer.logger is None:
            return
        import fsspec

        path = f"{trainer.log_dir.rstrip('/')}/{self.config_filename}"
        fs, local = fsspec.url_to_fs(path)
        if not self.overwrite and fs.exists(local):
            raise MisconfigurationError(
                f"The configuration file {path} exists already (from an earlier run in this log directory); it is "
                "not overwritten. Hint: use another log directory, TrainerCLI(save_config_kwargs={'overwrite': "
                "True}) to replace it, or save_config=False."
            )
        fs.makedirs(fs._parent(local), exist_ok=True)
        with fs.open(local, "w") as out:
            out.write(self.text)
        self.already_saved = True


class TrainerCLI:
    """Give your own ``train.py`` the ``fit``, ``validate``, ``test`` and ``predict`` subcommands of ``core``.

    Example::

        # train.py
        from torchplug.cli import TrainerCLI
        from mypackage import MyModule, MyDataModule

        if __name__ == "__main__":
            TrainerCLI(MyModule, MyDataModule)

        $ python train.py fit --model.lr=0.01 --trainer.accelerator=cuda --trainer.devices=2
        $ python train.py fit --config config.yaml --print_config > full.yaml

    Args:
        model_class: The Module class, whose ``__init__`` arguments become ``--model.*``. None: any
            Module subclass, chosen with ``--model=package.module.Class``.
        datamodule_class: The DataModule class (``--data.*``). None: any DataModule subclass, or none.
        trainer_class: The Trainer class (or a subclass) whose arguments become ``--trainer.*``.
        trainer_defaults: Default values of Trainer arguments: plain data (``{"max_epochs": 10}``),
            ``jsonargparse.lazy_instance(TensorBoardLogger, save_dir="logs")``, and under
            ``"callbacks"`` callback instances, which are added to those of the configuration.
        seed_everything_default: Default of ``--seed_everything``: an int, True (a random seed, recorded
            in the saved config) or False (do not seed).
        parser_kwargs: Keyword arguments of each subcommand's ``jsonargparse.ArgumentParser``
            (``default_config_files``...); a key named after a subcommand holds that one's.
        subclass_mode_model: Accept any subclass of ``model_class`` with ``--model=Class``.
        subclass_mode_data: Accept any subclass of ``datamodule_class`` with ``--data=Class``.
        save_config: Write the full configuration to ``<log_dir>/config.yaml`` when fitting with a logger
            (with ``run=False``: when the first run of :attr:`trainer` starts).
        save_config_kwargs: How it is written: ``config_filename`` (default ``"config.yaml"``),
            ``overwrite`` (default False: a file already there is an error), ``multifile`` (only False).
        args: The arguments to parse (default ``sys.argv[1:]``).
        run: Run the subcommand given in ``args``. False: parse without subcommands and only build
            :attr:`model`, :attr:`datamodule` and :attr:`trainer` (then call ``cli.trainer.fit(cli.model)``).
        prog: The program name shown in help and errors (default: the script's name).

    Attributes:
        parser: The jsonargparse parser (with one sub-parser per subcommand when ``run``).
        subcommand: The subcommand given (``"fit"``...), or None when ``run=False``.
        config: The parsed configuration (``config.fit.trainer.max_epochs`` when ``run``).
        seed: The seed ``--seed_everything`` used, or None when seeding is off.
        model: The Module built from ``--model``.
        datamodule: The DataModule built from ``--data``, or None when none was given.
        trainer: The Trainer built from ``--trainer.*``.

    Raises:
        SystemExit: Code 2 for a usage error (the message is printed first, with no traceback), and
            0 after ``--help`` or ``--print_config``. Errors raised while running propagate.
        ValueError: ``trainer_defaults`` names no argument of ``trainer_class``, or ``save_config_kwargs``
            has an unknown key or a value of the wrong type.
    """

    def __init__(
        self,
        model_class: type[Module] | None = None,
        datamodule_class: type[DataModule] | None = None,
        trainer_class: type[Trainer] = Trainer,
        trainer_defaults: Mapping[str, Any] | None = None,
        seed_everything_default: bool | int = True,
        parser_kwargs: Mapping[str, Any] | None = None,
        subclass_mode_model: bool = False,
        subclass_mode_data: bool = False,
        save_config: bool = True,
        save_config_kwargs: Mapping[str, Any] | None = None,
        args: Sequence[str] | None = None,
        run: bool = True,
        prog: str | None = None,
    ) -> None:
        self.model_class = model_class
        self.datamodule_class = datamodule_class
        self.trainer_class = trainer_class
        self.trainer_defaults = dict(trainer_defaults or {})
        self.seed_everything_default = seed_everything_default
        self.parser_kwargs = dict(parser_kwargs or {})
        self.subclass_mode_model = subclass_mode_model or model_class is None
        self.subclass_mode_data = subclass_mode_data or datamodule_class is None
        self.save_config = save_config
        self.save_config_kwargs = {**_SAVE_CONFIG_DEFAULTS, **_check_save_config_kwargs(save_config_kwargs)}
        self.prog = prog or os.path.basename(sys.argv[0] if sys.argv and sys.argv[0] else "train.py")
        self.subcommand: str | None = None
        self.seed: int | None = None
        argv = list(sys.argv[1:] if args is None else args)
        command = argv[0] if run and argv and argv[0] in SUBCOMMANDS else None
        self.parser = self._build_parser(run)
        context = ParseContext(
            f"{self.prog} {command}" if command else self.prog, tuple(argv), self._subcommand_parser_of(command)
        )
        with parsing(context):  # this CLI's, until it returns: its errors name its own program and options
            self._parse_and_run(argv, command, run)

    def _parse_and_run(self, argv: list[str], command: str | None, run: bool) -> None:
        problem = check_config_files(argv)
        if problem is not None:
            self._error(problem, command)
        for message in dropped_init_args(argv):  # before parsing: --print_config exits in it
            warnings.warn(message, UserWarning, stacklevel=2)
        self.config: Namespace = self.parser.parse_args(argv)
        self.subcommand = self.config.get("subcommand") if run else None
        self._check_config()
        self._seed()
        self.config_init: Namespace = self._instantiate()
        self.model: Module | None = self._section(self.config_init).get("model")
        self.datamodule: DataModule | None = self._section(self.config_init).get("data")
        self.trainer: Trainer = self._instantiate_trainer()
        if run:
            self._run()

    # -- the parser ---------------------------------------------------------------------------

    def _build_parser(self, run: bool) -> ArgumentParser:
        _import_short_names()
        if not run:
            return self._subcommand_parser(None)
        parser = Parser(
            prog=self.prog,
            description="Train, validate, test or predict with torchplug.",
            epilog=EXIT_CODES,
            formatter_class=HelpFormatter,
        )
        commands = parser.add_subcommands(required=True, dest="subcommand")
        for name, help_text in SUBCOMMANDS.items():
            commands.add_subcommand(name, self._subcommand_parser(name), help=help_text)
        return parser

    def _subcommand_parser(self, name: str | None) -> ArgumentParser:
        kwargs = {k: v for k, v in self.parser_kwargs.items() if k not in SUBCOMMANDS}
        kwargs.update(self.parser_kwargs.get(name or "", {}))
        description = f"{SUBCOMMANDS[name].capitalize()} (Trainer.{name})." if name else None
        prog = f"{self.prog} {name}" if name else self.prog
        parser = Parser(
            prog=prog,
            display_prog=prog,
            description=description,
            epilog=EXIT_CODES,
            formatter_class=HelpFormatter,
            **kwargs,
        )
        parser.add_argument(
            "-c",
            "--config",
            action="config",
            help="a YAML config file (repeat it: later files and options override earlier ones)",
        )
        parser.add_argument(
            "--seed_everything",
            type=bool | int,
            default=self.seed_everything_default,
            help="seed every random generator: an int, true for a random seed, or false",
        )
        self._add_trainer(parser)
        self._add_component(
            parser, "model", self.model_class or Module, self.subclass_mode_model, required=self.model_class is not None
        )
        self._add_component(
            parser, "data", self.datamodule_class or DataModule, self.subclass_mode_data, required=False
        )
        if name is not None:
            parser.add_argument(
                "--ckpt_path",
                type=str | None,
                default=None,
                help="start from this checkpoint: a path or URL, 'last', 'best', or 'auto' (the newest one, if any)",
            )
            parser.add_argument(
                "--resolve",
                action="store_true",
                help="print how the hardware arguments resolve (trainer.describe()) and exit",
            )
        if name == "fit":
            parser.add_argument(
                "--tune",
                type=str | None,
                default=None,
                help="before fitting, tune with torchplug.tuner.Tuner: 'lr' (learning-rate finder; the suggestion goes "
                "to the model's lr, the plot to <log_dir>/lr_find.png), 'batch_size' (largest batch size that fits), "
                "or 'batch_size,lr'",
            )
        self.add_arguments_to_parser(parser)
        return parser

    def _add_trainer(self, parser: ArgumentParser) -> None:
        parser.add_class_arguments(
            self.trainer_class, "trainer", instantiate=False, skip={"plugin_host"}, fail_untyped=False
        )
        defaults = {f"trainer.{key}": value for key, value in self.trainer_defaults.items() if key != "callbacks"}
        options = [a.dest.removeprefix("trainer.") for a in parser._actions if a.dest.startswith("trainer.")]
        for key in defaults:
            if key.removeprefix("trainer.") not in options:
                name = key.removeprefix("trainer.")
                close = difflib.get_close_matches(name, options, n=1, cutoff=0.75)
                maybe = f" Did you mean {close[0]!r}?" if close else ""
                raise ValueError(
                    f"TrainerCLI(trainer_defaults=...): {name!r} is not an argument of "
                    f"{self.trainer_class.__name__}.{maybe} Hint: give the names of its __init__ arguments."
                )
        if defaults:  # callbacks given as defaults are added to the configuration's at instantiation
            parser.set_defaults(defaults)
        host = plugin_host()
        for action in parser._actions:
            arg = action.dest.removeprefix("trainer.")
            if action.dest.startswith("trainer.") and arg in _NAMED and action.help is not argparse.SUPPRESS:
                try:
                    names = sorted({n for kind in _NAMED[arg] for n in host.registry(kind).names()})
                except PluginError:  # a strict host that failed: the error surfaces when the name is used
                    continue
                action.help = f"{action.help or ''} Installed: {', '.join(names)}.".strip()

    @staticmethod
    def _add_component(parser: ArgumentParser, key: str, cls: type, subclass_mode: bool, required: bool) -> None:
        if subclass_mode:
            parser.add_subclass_arguments(
                cls,
                key,
                required=required,
                help=f"a {cls.__name__} class path and its init args: --{key}=pkg.Class --{key}.arg=value",
            )
        else:
            parser.add_class_arguments(cls, key)

    def add_arguments_to_parser(self, parser: ArgumentParser) -> None:
        """Override to add arguments or links to each subcommand's parser (as in LightningCLI).

        Args:
            parser: The parser of one subcommand (or the only parser when ``run=False``); for example
                ``parser.link_arguments("data.num_classes", "model.init_args.num_classes", apply_on="instantiate")``.
        """

    # -- checks and seeding -------------------------------------------------------------------

    def _section(self, config: Namespace) -> Namespace:
        """The part of ``config`` that belongs to the subcommand given (all of it without subcommands)."""
        if self.subcommand is None:
            return config
        section: Namespace = config[self.subcommand]
        return section

    def _subcommand_parser_of(self, command: str | None) -> ArgumentParser:
        if command is None or self.parser._subcommands_action is None:
            return self.parser
        parser: ArgumentParser = self.parser._subcommands_action._name_parser_map[command]
        return parser

    def _error(self, message: str, command: str | None = None) -> NoReturn:
        self._subcommand_parser_of(command or self.subcommand).error(message)

    def _check_config(self) -> None:
        config = self._section(self.config)
        resolving = bool(config.get("resolve"))
        if self.subcommand is not None and config.get("model") is None and not resolving:
            self._error(
                "--model is required: give a torchplug.Module class path, for example "
                "--model=examples.digits.DigitsClassifier (or a config file with a 'model:' section)."
            )
        if resolving:  # the decision trace needs only the Trainer: leave out the model and data chosen by path
            if self.subclass_mode_model:
                config.model = None
            if self.subclass_mode_data:
                config.data = None
        tune = config.get("tune")
        if tune is not None:
            unknown = [item for item in _tune_items(tune) if item not in _TUNE_CHOICES]
            if unknown or not _tune_items(tune):
                self._error(
                    f"--tune={tune}: give 'lr', 'batch_size' or both ('batch_size,lr'); "
                    f"not {', '.join(map(repr, unknown)) or 'nothing'}."
                )
            ckpt_path = config.get("ckpt_path")
            if "lr" in _tune_items(tune) and ckpt_path is not None:
                self._error(
                    f"--tune={tune} with --ckpt_path={ckpt_path}: the learning rate found would be ignored, since "
                    "resuming restores the optimizer from the checkpoint, its learning rate included. Hint: tune "
                    "in a fresh run (without --ckpt_path) and resume with --ckpt_path alone, or leave 'lr' out of "
                    "--tune."
                )
        for arg, kinds in _NAMED.items():
            value = config.get(f"trainer.{arg}")
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, (str, int)) and not isinstance(item, bool) and str(item).lower() != "auto":
                    self._check_name(arg, kinds, str(item))

    def _check_name(self, arg: str, kinds: tuple[str, ...], name: str) -> None:
        """Exit with a usage error unless ``name`` is registered in one of ``kinds`` and loads."""
        host = plugin_host()
        option = f"--trainer.{arg}={name}"
        try:
            if len(kinds) == 1:
                _resolve_name(host, kinds[0], name)
                return
            if any(name.split("@")[0].lower() in host.registry(kind) for kind in kinds):
                return
        except PluginError as exc:
            hint = "" if "Hint:" in str(exc) else " Hint: core plugins list shows every installed name."
            self._error(f"{option}: {printable(exc)}{hint}")
        names = sorted({n for kind in kinds for n in host.registry(kind).names()})
        close = difflib.get_close_matches(name.lower(), names, n=3, cutoff=0.6)
        maybe = f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
        self._error(
            f"{option}: {name!r} is not a registered precision, checkpoint IO or cluster environment.{maybe} "
            f"Installed: {', '.join(names)}. Hint: core plugins list"
        )

    def _seed(self) -> None:
        config = self._section(self.config)
        value = config.get("seed_everything")
        if value is False:
            return
        try:  # True: a random seed, or the one a parent process exported (so every DDP rank agrees)
            self.seed = seed_everything(None if value is True else value, workers=True)
        except ValueError as exc:
            self._error(f"--seed_everything: {printable(exc)}")
        config.seed_everything = self.seed

    # -- running ------------------------------------------------------------------------------

    def _instantiate(self) -> Namespace:
        """Build the model, data and callbacks; an error raised by their ``__init__`` is one clean usage error."""
        try:
            config: Namespace = self.parser.instantiate(self.config)
        except Exception as exc:
            self._error(_construction_error(exc, self._section(self.config).get("trainer")))
        return config

    def _check_paths(self, config: Namespace) -> None:
        """Refuse, before any work, a missing ``--ckpt_path`` and a root directory that cannot be written."""
        ckpt_path = config.get("ckpt_path")
        if ckpt_path in _LIGHTNING_CKPT_WORDS:
            self._error(f"--ckpt_path={ckpt_path}: not a choice here: it is {_LIGHTNING_CKPT_WORDS[ckpt_path]}")
        if ckpt_path and ckpt_path not in _CKPT_WORDS and not _exists(str(ckpt_path)):
            self._error(
                f"--ckpt_path={ckpt_path}: no checkpoint file there. Hint: give the path of a .ckpt file (or "
                "'last' / 'best' for the ones the ModelCheckpoint callback wrote, 'auto' for the newest one)."
            )
        if self.subcommand != "fit":
            return
        root = self.trainer.default_root_dir
        problem = unwritable(root)
        if problem is not None:
            self._error(
                f"--trainer.default_root_dir={root}: logs and checkpoints cannot be written there ({problem}). "
                "Hint: give a directory you can write to, or leave the option out for the current directory."
            )

    def _instantiate_trainer(self) -> Trainer:
        config = self._section(self.config_init)
        kwargs = dict(vars(config.trainer))
        callbacks = kwargs.get("callbacks")
        given = [callbacks] if isinstance(callbacks, Callback) else list(callbacks or [])
        parser = self._subcommand_parser_of(self.subcommand)
        given += [config[key] for key in getattr(parser, "callback_keys", []) if config.get(key) is not None]
        default = self.trainer_defaults.get("callbacks")
        given += [default] if isinstance(default, Callback) else list(default or [])
        saving = self.subcommand == "fit" or self.subcommand is None
        if self.save_config and saving and not config.get("resolve") and not kwargs.get("fast_dev_run"):
            options = self.save_config_kwargs
            given.append(_SaveConfig(self._dump(), options["config_filename"], options["overwrite"]))
        kwargs["callbacks"] = given
        try:
            return self.trainer_class(**kwargs)
        except (MisconfigurationError, PluginError) as exc:
            self._error(_with_option(printable(exc)))

    def _dump(self) -> str:
        parser = self._subcommand_parser_of(self.subcommand)
        return str(parser.dump(self._section(self.config), skip_unset=False))

    def _run(self) -> None:
        config = self._section(self.config_init)
        if config.get("resolve"):
            print(self.trainer.describe())
            return
        self._check_paths(config)
        method = getattr(self.trainer, str(self.subcommand))
        start = time.perf_counter()
        try:
            if config.get("tune"):
                self._tune(_tune_items(config.tune))
            result = method(self.model, datamodule=self.datamodule, ckpt_path=config.get("ckpt_path"))
        except MisconfigurationError as exc:  # arguments that do not fit together, found while running
            self._error(_with_option(printable(exc)))
        except CheckpointLoadError as exc:  # --ckpt_path names a file that is not a whole checkpoint
            self._error(f"--ckpt_path={config.get('ckpt_path')}: {printable(exc)}")
        if self.subcommand == "fit":
            _print_fit_summary(self.trainer, time.perf_counter() - start)
        elif self.subcommand == "predict":
            _print_predictions(result)

    def _tune(self, items: list[str]) -> None:
        """``--tune``: the batch size first (the learning rate depends on it), then the learning rate."""
        from torchplug.tuner import Tuner

        assert self.model is not None
        tuner = Tuner(self.trainer)
        rank_zero = self.trainer.is_global_zero
        if "batch_size" in items:
            size = tuner.scale_batch_size(self.model, datamodule=self.datamodule)
            if rank_zero:
                print(f"tune: batch size {size}")
        if "lr" in items:
            finder = tuner.lr_find(self.model, datamodule=self.datamodule)
            if finder is None or not rank_zero:
                return
            lr, steps = finder.suggestion(), len(finder.results["lr"])
            if lr is None:
                print(f"tune: no learning rate suggested after {steps} steps (too few; the model keeps its own)")
                return
            print(f"tune: learning rate {lr} (suggested after {steps} steps)")
            if importlib.util.find_spec("matplotlib") is None:
                print("tune: no plot (matplotlib is not installed; pip install 'core[matplotlib]')")
            else:
                print(f"tune: plot {finder.save_plot(os.path.join(self.trainer.log_dir, 'lr_find.png'))}")


def _tune_items(value: str) -> list[str]:
    return [item.strip() for item in str(value).split(",") if item.strip()]


def _check_save_config_kwargs(kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    """``save_config_kwargs``: the known keys only; ``multifile=True`` is refused (one file is written)."""
    given = dict(kwargs or {})
    unknown = sorted(set(given) - set(_SAVE_CONFIG_DEFAULTS))
    if unknown:
        raise ValueError(
            f"TrainerCLI(save_config_kwargs=...): unknown key(s) {unknown}; known: {', '.join(_SAVE_CONFIG_DEFAULTS)}."
        )
    for key, value in given.items():  # a string "no" would be a true overwrite
        expected = str if key == "config_filename" else bool
        if not isinstance(value, expected) or value == "":
            what = "a file name" if expected is str else "True or False"
            raise ValueError(
                f"TrainerCLI(save_config_kwargs={{{key!r}: {value!r}}}) is not valid: {key!r} takes {what}. Hint: "
                f"save_config_kwargs={{{key!r}: {_SAVE_CONFIG_DEFAULTS[key]!r}}} is the default."
            )
    if given.get("multifile"):
        raise ValueError(
            "TrainerCLI(save_config_kwargs={'multifile': True}) is not supported: the whole configuration is written "
            "to one file."
        )
    return given


def _resolve_name(host: PluginHost, kind: str, name: str) -> None:
    """Resolve ``name`` in ``kind``'s registry; an accelerator may also be torch's current device type."""
    try:
        host.registry(kind).resolve(name)
    except UnknownPluginError as unknown:
        if kind != "accelerator":
            raise
        from torchplug.accelerators.torch_device import resolve_device_type

        resolve_device_type(name, unknown)  # raises the same error, extended with torch's current device


def _exists(path: str) -> bool:
    from fsspec.core import url_to_fs

    try:
        fs, fs_path = url_to_fs(path)
        return bool(fs.exists(fs_path))
    except Exception:  # an unknown protocol or an unreachable store: let the run report it in its own words
        return True


def _construction_error(exc: BaseException, trainer: Namespace | None = None) -> str:
    """One readable line for an error raised while building the model, the data or a callback, with its frame.

    jsonargparse reports it inside a list of the types it tried; the error raised by the user's own
    ``__init__`` is the last cause in the chain, and its last frame in the user's code is where it was raised.
    For a union type (``--trainer.callbacks+=...``, ``--trainer.logger=pkg.Logger``) jsonargparse keeps only
    its first member's complaint: the class given under ``trainer`` whose ``__init__`` raises is found again.
    """
    original = exc
    while original.__cause__ is not None:
        original = original.__cause__
    if original is exc:
        return str(exc)
    owner, frame = _raising_frame(original)
    if trainer is not None and not (owner or "").startswith("--"):  # not the model or data: a --trainer.* class?
        found = _trainer_class_error(trainer)
        if found is not None:
            return found
    return _described(owner or "building the objects", original, frame)


def _described(owner: str, error: BaseException, frame: traceback.FrameSummary | None) -> str:
    where = f'\n  File "{frame.filename}", line {frame.lineno}, in {frame.name}' if frame is not None else ""
    code = f"\n    {frame.line}" if frame is not None and frame.line else ""
    return f"{owner} raised {type(error).__name__}: {printable(error)}{where}{code}"


def _trainer_class_error(trainer: Namespace) -> str | None:
    """The error of the first class given by class path to a ``--trainer.*`` option whose ``__init__`` raises.

    Run only after building the objects failed, so nothing is built twice on a good configuration.
    Classes whose init args hold other classes are left to jsonargparse's own message.
    """
    for key, value in vars(trainer).items():
        items = value if isinstance(value, list) else [value]
        for index, item in enumerate(items):
            if not isinstance(item, Namespace) or not isinstance(item.get("class_path"), str):
                continue
            kwargs = dict(vars(item.get("init_args") or Namespace()))
            if any(isinstance(arg, Namespace) for arg in kwargs.values()):
                continue
            module, _, name = item.class_path.rpartition(".")
            try:
                getattr(importlib.import_module(module), name)(**kwargs)
            except Exception as error:
                owner, frame = _raising_frame(error)
                if owner is None:
                    continue  # not raised by the class itself: jsonargparse's message says more
                at = f"[{index}]" if len(items) > 1 else ""
                return _described(f"--trainer.{key}{at}={item.class_path}: {name}.__init__", error, frame)
    return None


def _raising_frame(exc: BaseException) -> tuple[str | None, traceback.FrameSummary | None]:
    """The class whose ``__init__`` raised (``--model=pkg.Class``), and the innermost frame outside libraries."""
    owner: str | None = None
    tb = exc.__traceback__
    while tb is not None:
        instance = tb.tb_frame.f_locals.get("self") if tb.tb_frame.f_code.co_name == "__init__" else None
        if owner is None and isinstance(instance, (Module, DataModule, Callback, Logger)):
            kind = "--model" if isinstance(instance, Module) else "--data" if isinstance(instance, DataModule) else ""
            name = f"{type(instance).__module__}.{type(instance).__qualname__}"
            owner = f"{kind}={name}: {type(instance).__name__}.__init__" if kind else f"{name}.__init__"
        tb = tb.tb_next
    libraries = {sysconfig.get_paths()[key] for key in ("stdlib", "purelib", "platlib")}
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(tuple(libraries))]
    return owner, (frames[-1] if frames else None)


def _with_option(message: str) -> str:
    """Prefix the Trainer option a message is about (``devices='x' ...`` is about ``--trainer.devices``)."""
    names = set(inspect.signature(Trainer.__init__).parameters)
    for match in _ARGUMENT.finditer(message):
        if match.group(1) in names:
            return f"--trainer.{match.group(1)}: {message}"
    return message


def _print_fit_summary(trainer: Trainer, seconds: float) -> None:
    """Rank 0 prints what the run did, its final metrics (validation first), best checkpoint and logs."""
    if not trainer.is_global_zero:
        return
    print(f"fit: {trainer.current_epoch} epoch(s), {trainer.global_step} step(s) in {seconds:.1f} s")
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if _is_number(v)}
    ordered = sorted(metrics, key=lambda k: (not k.startswith("val"), k))
    if ordered:
        print("fit: final metrics: " + "  ".join(f"{k}={metrics[k]:.4f}" for k in ordered))
    checkpoint = trainer.checkpoint_callback
    if checkpoint is not None and checkpoint.best_model_path:
        score = checkpoint.best_model_score
        scored = f" ({checkpoint.monitor}={float(score):.4f})" if score is not None and checkpoint.monitor else ""
        print(f"fit: best checkpoint {checkpoint.best_model_path}{scored}")
    if trainer.logger is not None:
        print(f"fit: logs in {trainer.log_dir}")


def _is_number(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError, RuntimeError):  # a tensor of several elements
        return False
    return True


def _print_predictions(result: Any) -> None:
    count = len(result) if isinstance(result, list) else 0
    print(f"predict: {count} batch(es) of predictions (write them to disk with a callback's on_predict_batch_end)")


def _import_short_names() -> None:
    for module in _SHORT_NAMES:
        importlib.import_module(module)


def run_command(argv: Sequence[str], prog: str = "core") -> int:
    """Run ``core fit|validate|test|predict ARGS`` and return its exit code (see :data:`EXIT_CODES`).

    Plugins are discovered first, with the current directory out of ``sys.path``. Then the directory
    is appended to ``sys.path`` (last), so that ``--model=examples.digits.DigitsClassifier`` works
    from the folder that holds ``examples/`` while installed packages always win over a file of
    the same name there.

    Args:
        argv: The subcommand and its arguments (``["fit", "--config", "config.yaml"]``).
        prog: The program name shown in help and errors.
    """
    try:
        plugin_host().ensure_loaded()  # before the current directory is on sys.path
    except PluginLoadError:
        pass  # TORCHPLUG_STRICT_PLUGINS=1: raised as a usage error where a name is used
    except SettingsError as exc:
        print(f"{' '.join([prog, *argv[:1]])}: error: {printable(exc)}", file=sys.stderr)
        return 2
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.append(cwd)
    try:
        TrainerCLI(args=argv, prog=prog)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0
