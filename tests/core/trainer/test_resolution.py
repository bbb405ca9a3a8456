"""How the Trainer's hardware arguments resolve: instance > name > auto, strategy components win, clear errors."""

from __future__ import annotations

import pathlib
import re
import warnings
from collections import Counter

import pytest
import torch

import torchplug
from torchplug._host import PluginHost
from torchplug._registry import INSTALL_HINTS, NameResolution, Registry, RegistryEntry
from torchplug._settings import PluginSettings
from torchplug.accelerators.cpu import CPUAccelerator
from torchplug.environments.local import LocalEnvironment
from torchplug.io.torch_io import TorchCheckpointIO
from torchplug.precision.amp import MixedPrecision
from torchplug.strategies.ddp import DDPStrategy
from torchplug.strategies.single_device import SingleDeviceStrategy
from torchplug.trainer.connector import resolve
from torchplug.utilities.warn import reset_warned

CPU = torch.device("cpu")


def test_defaults_resolve_to_one_cpu_process() -> None:
    resolution = resolve()
    strategy = resolution.strategy
    assert isinstance(strategy, SingleDeviceStrategy)
    assert isinstance(strategy.accelerator, CPUAccelerator)
    assert type(strategy.precision) is torchplug.Precision
    assert isinstance(strategy.checkpoint_io, TorchCheckpointIO)
    assert isinstance(strategy.cluster_environment, LocalEnvironment)
    assert [d.what for d in resolution.trace] == [
        "accelerator",
        "cluster_environment",
        "devices",
        "strategy",
        "precision",
        "checkpoint_io",
    ]


def test_describe_explains_every_choice() -> None:
    text = torchplug.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False).describe()
    assert re.search(r"^accelerator\s+cpu\s+\(accelerator='auto': highest priority available", text, re.M)
    assert re.search(
        r"^strategy\s+single_device\s+\(strategy='auto': CPUAccelerator.default_strategy\(devices=1", text, re.M
    )
    assert re.search(r"^precision\s+32-true\s+\(default, from core", text, re.M)
    assert re.search(r"^cluster_environment\s+local\s+\(.*torchelastic: not detected", text, re.M)


def test_the_trainer_logs_what_it_runs_on_once_at_info(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO", logger="torchplug"):
        torchplug.Trainer(accelerator="cpu", devices=2, num_nodes=2, precision="bf16-mixed", logger=False)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Trainer:")]
    # no accelerator device here: nothing is said about one left unused (tests/torch_device says it)
    assert lines == [
        "Trainer: accelerator 'cpu', 2 devices (cpu) on each of 2 nodes, strategy 'ddp', precision 'bf16-mixed'."
    ]


@pytest.mark.parametrize(
    ("precision", "expected"),
    [("bf16", "bf16-mixed"), (16, "16-mixed"), ("64", "64-true"), ("half", "16-true"), ("32-true", "32-true")],
)
def test_precision_names_and_aliases(precision: object, expected: str) -> None:
    resolution = resolve(precision=precision)
    assert resolution.trace[4].value == expected


def test_names_come_from_the_registry_with_their_provider() -> None:
    resolution = resolve(strategy="ddp_spawn", devices=2)
    strategy = resolution.strategy
    assert isinstance(strategy, DDPStrategy) and strategy.start_method == "spawn"
    assert strategy.num_processes == 2
    assert "strategy='ddp_spawn', from core 0.1.0, built-in" in resolution.describe()


def test_auto_strategy_for_several_devices_is_the_accelerators_parallel_default() -> None:
    strategy = resolve(devices=2).strategy
    assert isinstance(strategy, DDPStrategy) and strategy.start_method == "popen"


def test_an_instance_beats_a_name() -> None:
    precision = MixedPrecision("bf16-mixed")
    io = TorchCheckpointIO(fsync=True)
    resolution = resolve(precision=precision, plugins=[io])
    assert resolution.strategy.precision is precision
    assert resolution.strategy.checkpoint_io is io


def test_plugins_accept_registered_names_of_each_kind() -> None:
    strategy = resolve(plugins=["async", "local"]).strategy
    assert type(strategy.checkpoint_io).__name__ == "AsyncCheckpointIO"
    assert isinstance(strategy.checkpoint_io.checkpoint_io, TorchCheckpointIO)  # the wrapped default IO
    assert isinstance(strategy.cluster_environment, LocalEnvironment)


def test_a_strategy_instance_keeps_its_own_components() -> None:
    accelerator = CPUAccelerator()
    io = TorchCheckpointIO()
    strategy = SingleDeviceStrategy(accelerator=accelerator, checkpoint_io=io)
    resolved = resolve(strategy=strategy).strategy
    assert resolved is strategy and resolved.accelerator is accelerator and resolved.checkpoint_io is io


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"strategy": SingleDeviceStrategy(accelerator=CPUAccelerator()), "accelerator": "cpu"},
            "accelerator is set twice: by strategy=SingleDeviceStrategy(accelerator=CPUAccelerator) and by "
            "accelerator='cpu'. Choose one.",
        ),
        (
            {"strategy": SingleDeviceStrategy(checkpoint_io=TorchCheckpointIO()), "plugins": ["async"]},
            "checkpoint IO is set twice",
        ),
        ({"precision": "bf16-mixed", "plugins": [MixedPrecision("16-mixed")]}, "precision is set more than once"),
        ({"plugins": [TorchCheckpointIO(), "async"]}, "plugins= holds two checkpoint io plugins"),
        (
            {"plugins": ["nosuchplugin"]},
            "plugins=['nosuchplugin'] is not a registered precision, checkpoint IO or cluster environment. Installed:",
        ),
        ({"plugins": [42]}, "plugins=[42] has type int"),
        ({"strategy": "single_device", "devices": 2}, "strategy=SingleDeviceStrategy runs one process, but devices=2"),
        ({"devices": 0}, "devices=0 selects no device"),
        ({"devices": "two"}, "devices='two' is not valid with the CPU accelerator"),
        ({"num_nodes": 0}, "num_nodes=0 is not valid: give a positive int."),
    ],
)
def test_conflicts_and_bad_values_raise_in_the_users_words(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(torchplug.MisconfigurationError) as info:
        resolve(**kwargs)  # type: ignore[arg-type]
    assert message in str(info.value)


def test_unknown_accelerator_lists_the_installed_ones_and_the_package_to_install() -> None:
    core_only = PluginHost(PluginSettings(autoload=False))  # whatever backends this environment has installed
    with pytest.raises(torchplug.UnknownPluginError) as info:
        torchplug.Trainer(accelerator="tpu", plugin_host=core_only)
    assert "Unknown accelerator 'tpu'." in str(info.value)
    assert "Installed: cpu" in str(info.value)
    assert "Hint: pip install accel-tpu" in str(info.value)


def test_unknown_strategy_suggests_a_close_name() -> None:
    with pytest.raises(torchplug.UnknownPluginError, match="Did you mean 'ddp_spawn'"):
        resolve(strategy="ddp_spwn", devices=2)


def test_core_source_has_no_device_type_tests() -> None:
    """The core asks the accelerator plugin; it never tests which device it has."""
    source = pathlib.Path(torchplug.__file__).parent
    patterns = [
        r"\.type\s*==\s*['\"]",
        r"isinstance\([^)]*(CUDA|XLA|TPU|IPU|HPU|MPS)\w*Accelerator",
        r"==\s*['\"](cuda|xla|mps|hpu|ipu)['\"]",
    ]
    offenders = [
        f"{path.relative_to(source)}:{number}: {line.strip()}"
        for path in source.rglob("*.py")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if any(re.search(p, line) for p in patterns)
    ]
    assert not offenders, "\n".join(offenders)


class _LookupCounter:
    """Counts, per (kind, name), the registry's name lookups: ``resolve`` and the conflict rules behind it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.resolved: Counter[tuple[str, str]] = Counter()
        self.ruled: Counter[tuple[str, str]] = Counter()
        resolve_, resolution = Registry.resolve, Registry.resolution

        def counted_resolve(registry: Registry, name: str) -> RegistryEntry:
            self.resolved[registry.kind, name] += 1
            return resolve_(registry, name)

        def counted_resolution(registry: Registry, key: str) -> NameResolution:
            self.ruled[registry.kind, key] += 1
            return resolution(registry, key)

        monkeypatch.setattr(Registry, "resolve", counted_resolve)
        monkeypatch.setattr(Registry, "resolution", counted_resolution)


def test_each_name_is_looked_up_once(monkeypatch: pytest.MonkeyPatch) -> None:
    lookups = _LookupCounter(monkeypatch)
    trainer = torchplug.Trainer(
        accelerator="cpu",
        strategy="ddp_spawn",
        devices=2,
        precision="bf16",
        plugins=["async", "local"],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
    )
    assert lookups.resolved == {
        ("accelerator", "cpu"): 1,
        ("strategy", "ddp_spawn"): 1,
        ("precision", "bf16"): 1,
        ("checkpoint_io", "async"): 1,
        ("checkpoint_io", "torch"): 1,  # the accelerator's default IO, wrapped by "async"
        ("cluster_environment", "local"): 1,
    }
    assert lookups.ruled == lookups.resolved  # resolve() applied the conflict rules once per name
    assert type(trainer.strategy.checkpoint_io).__name__ == "AsyncCheckpointIO"
    assert type(trainer.strategy.precision).__name__ == "MixedPrecision"


def test_auto_looks_each_name_up_at_most_once(monkeypatch: pytest.MonkeyPatch) -> None:
    lookups = _LookupCounter(monkeypatch)
    resolve(devices=2)
    assert lookups.ruled and max(lookups.ruled.values()) == 1, lookups.ruled
    assert lookups.resolved and max(lookups.resolved.values()) == 1, lookups.resolved


def test_a_qualified_name_keeps_its_provider_through_the_precision_mapping(monkeypatch: pytest.MonkeyPatch) -> None:
    lookups = _LookupCounter(monkeypatch)
    resolution = resolve(precision="bf16-mixed@core")
    assert "precision=bf16-mixed@core" in resolution.describe().replace("'", "")
    assert lookups.resolved[("precision", "bf16-mixed@core")] == 1
    assert ("precision", "bf16-mixed") not in lookups.resolved


_TORCHRUN_TWO_PROCESSES = {
    "TORCHELASTIC_RUN_ID": "job",
    "WORLD_SIZE": "2",
    "RANK": "0",
    "LOCAL_RANK": "0",
    "LOCAL_WORLD_SIZE": "2",
    "GROUP_RANK": "0",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29500",
}


@pytest.mark.parametrize(
    "kwargs",
    [{"devices": 1}, {"devices": 1, "strategy": "single_device"}],
    ids=["devices=1", "single_device"],
)
def test_one_process_strategy_under_a_launcher_that_started_several_is_warned(
    monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, object]
) -> None:
    for name, value in _TORCHRUN_TWO_PROCESSES.items():
        monkeypatch.setenv(name, value)
    reset_warned()
    with pytest.warns(UserWarning, match="trains on its own") as record:
        resolution = resolve(accelerator="cpu", **kwargs)  # type: ignore[arg-type]
    assert resolution.strategy.world_size == 1  # each torchrun process would train alone, as rank 0
    message = str(record[0].message)
    assert "devices=1 with strategy=SingleDeviceStrategy runs one process, but TorchElasticEnvironment started 2" in (
        message
    )
    assert "each of them trains on its own as global rank 0" in message
    assert "Hint: use devices='auto' (or devices=2)" in message
    assert "TORCHPLUG_SKIP_CLUSTER_ENVIRONMENTS=torchelastic" in message


def test_devices_auto_under_a_launcher_joins_its_processes_without_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in _TORCHRUN_TWO_PROCESSES.items():
        monkeypatch.setenv(name, value)
    reset_warned()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        resolution = resolve(accelerator="cpu")
    assert isinstance(resolution.strategy, DDPStrategy) and resolution.strategy.world_size == 2


def test_a_strategy_made_for_a_device_of_another_accelerator_is_refused() -> None:
    with pytest.raises(
        torchplug.MisconfigurationError,
        match=r"strategy=SingleDeviceStrategy was made for device 'cuda:0', which is not a device of CPUAccelerator "
        r"\(its devices here: cpu\)\. Hint: ",
    ):
        resolve(accelerator="cpu", strategy=SingleDeviceStrategy(device="cuda:0"))


@pytest.mark.parametrize(
    ("strategy", "devices", "message"),
    [
        (SingleDeviceStrategy(device="cpu"), 2, "by strategy=SingleDeviceStrategy, made for cpu, and by devices=2"),
        (
            DDPStrategy(parallel_devices=[CPU] * 3),
            2,
            "by strategy=DDPStrategy, made for cpu, cpu, cpu, and by devices=2",
        ),
    ],
    ids=["single-device", "ddp"],
)
def test_devices_that_contradict_the_strategys_own_are_refused(strategy: object, devices: int, message: str) -> None:
    with pytest.raises(torchplug.MisconfigurationError, match=r"^The devices are set twice: ") as info:
        resolve(accelerator="cpu", strategy=strategy, devices=devices)  # type: ignore[arg-type]
    assert message in str(info.value)


def test_the_strategys_own_devices_are_the_ones_counted_and_described() -> None:
    resolution = resolve(accelerator="cpu", strategy=DDPStrategy(parallel_devices=[CPU] * 3))
    assert resolution.num_devices == resolution.strategy.num_processes == 3
    assert "devices              cpu, cpu, cpu  (given by the strategy instance)" in resolution.describe()


class _PrefersMissingIO(CPUAccelerator):
    """The CPU, asking for a checkpoint IO that no installed package provides."""

    default_checkpoint_io = "xla"


def test_the_fallback_from_an_accelerators_missing_checkpoint_io_is_warned_about() -> None:
    reset_warned()
    with pytest.warns(UserWarning, match="Checkpoints are written with") as record:
        resolution = resolve(accelerator=_PrefersMissingIO(), host=PluginHost(PluginSettings(autoload=False)))
    assert isinstance(resolution.strategy.checkpoint_io, TorchCheckpointIO)
    assert [str(w.message) for w in record] == [
        "Checkpoints are written with the core's 'torch' checkpoint IO: _PrefersMissingIO prefers the checkpoint "
        "IO 'xla', which is not installed. Hint: pip install io-xla"
    ]


def test_no_fallback_is_warned_about_when_a_checkpoint_io_is_given() -> None:
    reset_warned()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        resolve(accelerator=_PrefersMissingIO(), plugins=["torch"], host=PluginHost(PluginSettings(autoload=False)))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"plugins": ["ddp"]},
            "plugins=['ddp'] is not valid: 'ddp' is a registered strategy, and plugins= takes precisions, checkpoint "
            "IOs and cluster environments. Hint: Trainer(strategy='ddp').",
        ),
        ({"plugins": ["cpu"]}, "'cpu' is a registered accelerator, and plugins= takes"),
        (
            {"plugins": [DDPStrategy()]},
            "it is a Strategy, and plugins= takes precisions, checkpoint IOs and cluster "
            "environments. Hint: Trainer(strategy=DDPStrategy(...)).",
        ),
        ({"plugins": [CPUAccelerator()]}, "Hint: Trainer(accelerator=CPUAccelerator(...))."),
        (
            {"precision": True},
            "precision=True has type bool; give a registered name or alias ('bf16-mixed', '16-mixed', '32-true', 16, "
            "32, 64...) or a Precision instance. Hint: ",
        ),
        ({"precision": 16.0}, "precision=16.0 has type float"),
        (
            {"precision": "bf16-mixed", "strategy": SingleDeviceStrategy(precision=MixedPrecision("16-mixed"))},
            "The precision is set more than once: precision='bf16-mixed', strategy=SingleDeviceStrategy(precision="
            "MixedPrecision(precision='16-mixed', device_type=None)). Choose one. Hint: ",
        ),
    ],
    ids=["strategy-name", "accelerator-name", "strategy-instance", "accelerator-instance", "bool", "float", "twice"],
)
def test_arguments_given_in_the_wrong_place_or_type_say_where_they_belong(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(torchplug.MisconfigurationError) as info:
        resolve(**kwargs)  # type: ignore[arg-type]
    assert message in str(info.value)


def test_devices_that_contradict_the_processes_a_launcher_started_are_refused_when_the_trainer_is_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in _TORCHRUN_TWO_PROCESSES.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(
        torchplug.MisconfigurationError,
        match=r"You set `devices=3`, but torchrun started 2 processes per node \(`--nproc_per_node=2`, "
        r"LOCAL_WORLD_SIZE=2\)\. Hint: ",
    ):
        resolve(accelerator="cpu", devices=3)  # refused at fit() before, when the launcher started


def _first_party_names() -> list[tuple[str, str, str]]:
    """(kind, name, distribution) for every first-party name; a name of several kinds under the kind plugins= takes."""
    found: dict[str, tuple[str, str, str]] = {}
    for kind in ("precision", "checkpoint_io", "cluster_environment", "strategy", "accelerator", "logger"):
        for name, distribution in INSTALL_HINTS[kind].items():
            found.setdefault(name, (kind, name, distribution))
    return sorted(found.values())


_FIRST_PARTY = _first_party_names()


@pytest.mark.parametrize(("kind", "name", "distribution"), _FIRST_PARTY)
def test_a_first_party_name_in_plugins_that_is_not_installed_says_what_to_install(
    kind: str, name: str, distribution: str
) -> None:
    host = PluginHost(PluginSettings(autoload=False))  # only the built-ins: no first-party package installed
    with pytest.raises(torchplug.MisconfigurationError) as info:
        resolve(host=host, plugins=[name])
    message = str(info.value)
    assert f"{name!r} is the {kind.replace('_', ' ')} of {distribution}, which is not installed" in message
    assert f"Hint: pip install {distribution}" in message
    assert "Installed:" not in message
