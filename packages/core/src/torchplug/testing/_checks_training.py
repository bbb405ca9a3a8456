"""Checks that train with the real Trainer: one device in this process, two processes, precisions, exact resume.

Every kind is trained the way a user would use it: an accelerator as ``accelerator=NAME``, a
strategy as ``strategy=NAME``, a precision as ``precision=NAME``, a checkpoint IO or a cluster
environment in ``plugins=[NAME]`` (see :meth:`Subject.trainer_arguments`).
"""

from __future__ import annotations

from typing import Any, Final

from torchplug._errors import MisconfigurationError, PluginError
from torchplug._registry import KINDS
from torchplug.testing._check import CheckFailed, CheckSkipped, check
from torchplug.testing._context import Context
from torchplug.testing._processes import worker_fit

#: The kinds of the hardware stack (every kind but loggers): their checks ask trainer.describe() and resume.
HARDWARE_KINDS: Final = tuple(kind for kind in KINDS if kind != "logger")

#: The precision names every user may write (the accelerator maps or refuses each).
STANDARD_PRECISIONS: Final = ("64-true", "32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true")

#: Optimizer steps of a short fit; a full run is 2 epochs of 8 steps, interrupted after step 11.
SHORT_STEPS: Final = 6
FULL_STEPS: Final = 16
INTERRUPT_AT: Final = 11

_DESCRIBE_KEY: Final = {
    "accelerator": "accelerator",
    "strategy": "strategy",
    "precision": "precision",
    "checkpoint_io": "checkpoint_io",
    "cluster_environment": "cluster_environment",
}


def _distributed(context: Context) -> bool:
    return context.subject.kind == "strategy" and bool(getattr(context.subject.load(), "is_distributed", False))


@check(
    HARDWARE_KINDS,
    "describe",
    summary="Trainer(...) built with this plugin by name uses it, and trainer.describe() says so",
    fix="make the class constructible from its registered init params alone, and accept what the Trainer "
    "passes to it (see the base class); the Trainer names the plugin in describe() once it is chosen",
)
def describe(context: Context) -> str:
    import torchplug

    subject = context.subject
    subject.require_partner_available()
    trainer = torchplug.Trainer(devices=1, logger=False, enable_checkpointing=False, **subject.trainer_arguments())
    text = trainer.describe()
    key = _DESCRIBE_KEY[subject.kind]
    line = next((ln for ln in text.splitlines() if ln.split() and ln.split()[0] == key), None)
    component = {
        "accelerator": trainer.accelerator,
        "strategy": trainer.strategy,
        "precision": trainer.precision_plugin,
        "checkpoint_io": trainer.checkpoint_io,
        "cluster_environment": trainer.cluster_environment,
    }[subject.kind]
    if not isinstance(component, subject.load()):
        raise CheckFailed(f"the Trainer's {key} is {component!r}, not a {subject.load().__name__}:\n{text}")
    if line is None or subject.entry.name not in line.split()[1:2]:
        raise CheckFailed(f"trainer.describe() does not name {subject.entry.name!r} for {key}:\n{text}")
    return line.strip()


@check(
    KINDS,
    "fit",
    summary="a short fit on one device in this process: every step runs, losses and weights stay finite",
    fix="follow the traceback: the Trainer calls the plugin as its base class documents; each method must work "
    "on the devices the accelerator gives",
)
def fit(context: Context) -> str:
    from torchplug.testing import _training

    subject = context.subject
    if _distributed(context):
        raise CheckSkipped("a distributed strategy trains in processes of its own: see ddp_fit")
    subject.require_partner_available()
    result = _training.run_fit(context.workdir, devices=1, max_steps=SHORT_STEPS, **subject.trainer_arguments())
    return _check_run(result, SHORT_STEPS)


def _check_run(result: Any, steps: int) -> str:
    from torchplug.testing import _training

    if result.global_step != steps:
        raise CheckFailed(f"the fit stopped after {result.global_step} optimizer steps instead of {steps}")
    if not _training.finite(result):
        raise CheckFailed(f"the fit produced non-finite values: losses {result.losses}")
    if result.misplaced:
        raise CheckFailed(f"training batches arrived where the weights are not: {sorted(result.misplaced)}")
    return f"{steps} steps on {result.root_device}, final loss {result.losses[-1]:.3f}"


# -- precisions (accelerators) -------------------------------------------------------------------


def _precision_check(precision: str) -> None:
    @check(
        "accelerator",
        f"precision[{precision}]",
        summary=f"precision={precision!r} trains with finite losses, or Trainer() refuses it by name",
        fix="list in supported_precisions exactly what trains on this hardware, and map user names to your own "
        "precision plugins in precision_for(); what is not supported is then refused before training",
    )
    def trains_or_refused(context: Context) -> str:
        return _fit_precision(context, precision)


for _name in STANDARD_PRECISIONS:
    _precision_check(_name)


def _fit_precision(context: Context, precision: str) -> str:
    import torchplug
    from torchplug.testing import _training

    subject = context.subject
    subject.require_available()
    cls = subject.load()
    arguments: dict[str, Any] = {"accelerator": subject.entry.name, "plugin_host": subject.host, "devices": 1}
    try:
        torchplug.Trainer(precision=precision, logger=False, **arguments)
    except (MisconfigurationError, PluginError) as exc:
        declared = cls.supported_precisions is not None and precision in cls.supported_precisions
        if declared or precision not in str(exc):
            raise CheckFailed(
                f"Trainer(precision={precision!r}) raised {type(exc).__name__}: {exc}"
                + (" although supported_precisions declares it" if declared else "")
            ) from exc
        return f"refused: {exc}"
    result = _training.run_fit(context.workdir, precision=precision, max_steps=4, **arguments)
    _check_run(result, 4)
    return f"trained as {_described(result.describe, 'precision')}, loss {result.losses[-1]:.3f}"


def _described(text: str, key: str) -> str:
    line = next((ln for ln in text.splitlines() if ln.split() and ln.split()[0] == key), "")
    return line.split()[1] if len(line.split()) > 1 else "?"


@check(
    "accelerator",
    "precision[declared]",
    summary="every precision in supported_precisions that no standard name reaches trains too",
    fix="remove from supported_precisions what does not train, or fix that precision plugin",
)
def precision_declared(context: Context) -> str:
    subject = context.subject
    subject.require_available()
    cls = subject.load()
    if cls.supported_precisions is None:
        return "supported_precisions is None (every registered precision): the standard names are checked above"
    accelerator = subject.create()
    reached = set()
    for name in STANDARD_PRECISIONS:
        try:
            reached.add(accelerator.precision_for(name))
        except Exception:  # refused names reach nothing
            continue
    extra = sorted(set(cls.supported_precisions) - reached - set(STANDARD_PRECISIONS))
    if not extra:
        return "every declared precision is reached through a standard name"
    return "; ".join(f"{name}: {_fit_precision(context, name)}" for name in extra)


# -- exact resume --------------------------------------------------------------------------------


@check(
    HARDWARE_KINDS,
    "checkpoint_resume",
    summary="a run interrupted after a checkpoint and resumed from it ends bit-for-bit as an uninterrupted run",
    fix="save everything a resume needs (for an accelerator: get_rng_state() with every device generator; for a "
    "strategy or precision: optimizer, scaler and module state) and restore it exactly",
)
def checkpoint_resume(context: Context) -> str:
    from torchplug.testing import _training

    subject = context.subject
    if _distributed(context):
        return _resume_in_processes(context)
    subject.require_partner_available()
    arguments = {"devices": 1, **subject.trainer_arguments()}
    reference = _training.run_fit(context.workdir / "reference", **arguments)
    _training.run_fit(context.workdir / "interrupted", crash_at=INTERRUPT_AT, **arguments)
    path = context.workdir / "interrupted" / "interrupted.ckpt"
    resumed = _training.run_fit(context.workdir / "resumed", ckpt_path=str(path), **arguments)
    return _compare_resume(reference.weights, resumed.weights, (resumed.global_step, FULL_STEPS), INTERRUPT_AT)


def _compare_resume(reference: dict[str, Any], resumed: dict[str, Any], steps: tuple[int, int], at: int) -> str:
    from torchplug.testing import _training

    if steps[0] != steps[1]:
        raise CheckFailed(f"the resumed run ended at step {steps[0]} instead of {steps[1]}")
    differ = _training.mismatched(reference, resumed)
    if differ:
        raise CheckFailed(
            f"resumed from step {at}, the run ends with weights that differ from the uninterrupted run "
            f"in {', '.join(differ)}"
        )
    return f"interrupted after step {at} of {steps[1]}, resumed: identical weights"


def _resume_in_processes(context: Context) -> str:
    import torch

    arguments = _ddp_arguments(context)
    reference = _ddp_records(context)[0]
    total = int(reference["global_step"])
    at = total - max(1, total // 3)  # in the last epoch, mid-way
    worker_fit(context, "interrupted", arguments, crash_at=at)
    path = context.workdir / "interrupted" / "interrupted.ckpt"
    resumed = worker_fit(context, "resumed", arguments, ckpt_path=str(path))[0]

    def tensors(record: dict[str, Any]) -> dict[str, Any]:
        return {k: torch.tensor(v) for k, v in record["weights"].items()}

    return _compare_resume(tensors(reference), tensors(resumed), (resumed["global_step"], total), at)


# -- two processes ---------------------------------------------------------------------------------


def _ddp_arguments(context: Context) -> dict[str, Any]:
    """Trainer arguments for two devices, or a skip saying why there are not two."""
    subject = context.subject
    subject.require_partner_available()
    if subject.entry.provider.plugin == "runtime" and subject.entry.provider.distribution is None:
        raise CheckSkipped("registered at run time in this process: the processes a check starts cannot see it")
    accelerator = subject.host.registry("accelerator").resolve(subject.partner()).load()
    count = accelerator.auto_device_count()
    try:
        accelerator.parse_devices(2)
    except (TypeError, ValueError) as exc:
        if count < 2:
            raise CheckSkipped(f"needs 2 devices, found {count}") from exc
        raise CheckSkipped(f"needs devices=2, which {accelerator.__name__} refuses: {exc}") from exc
    arguments = {k: v for k, v in subject.trainer_arguments().items() if k != "plugin_host"}
    return {**arguments, "devices": 2}


def _ddp_records(context: Context) -> list[dict[str, Any]]:
    """The records of the two-device fit (run once per verification, shared by the checks that read it)."""
    arguments = _ddp_arguments(context)
    key = ("ddp", repr(arguments))
    cached = context.cache.get(key)
    if isinstance(cached, BaseException):
        raise CheckFailed(f"the two-device fit failed (see ddp_fit): {cached}")
    if cached is None:
        try:
            cached = worker_fit(context, "ddp", arguments, collectives=True)
        except CheckFailed as exc:
            context.cache[key] = exc
            raise
        context.cache[key] = cached
    records: list[dict[str, Any]] = cached
    return records


def _multi_process(context: Context) -> None:
    if context.subject.kind == "strategy" and not _distributed(context):
        raise CheckSkipped("a single-process strategy (is_distributed is False): see fit")


@check(
    ("accelerator", "strategy"),
    "ddp_fit",
    summary="a fit on two devices with the parallel strategy, in real processes: ranks agree on the weights",
    fix="make the parallel strategy start one process per device (or run its replicas), join them in a process "
    "group of process_group_backend, and keep their weights in sync",
)
def ddp_fit(context: Context) -> str:
    _multi_process(context)
    records = _ddp_records(context)
    world = records[0]["world_size"]
    if len(records) != world or [r["rank"] for r in records] != list(range(world)):
        raise CheckFailed(f"world size {world}, but records came from ranks {[r['rank'] for r in records]}")
    steps = {r["global_step"] for r in records}
    if len(steps) != 1:
        raise CheckFailed(f"the ranks ended at different steps: {steps}")
    differ = [r["rank"] for r in records[1:] if r["weights"] != records[0]["weights"]]
    if differ:
        raise CheckFailed(f"after training, the weights of rank(s) {differ} differ from rank 0's")
    return f"{records[0]['strategy']}: {world} process(es), {steps.pop()} steps, weights in sync"


@check(
    ("accelerator", "strategy"),
    "collectives",
    summary="barrier, broadcast, all_gather, reduce (sum, mean, max) and reduce_boolean_decision agree across ranks",
    fix="implement the collectives as the Strategy base class documents: all_gather stacks on a new first "
    "dimension of size world_size, broadcast returns the object of rank src everywhere",
)
def collectives(context: Context) -> str:
    from torchplug.testing import _training

    subject = context.subject
    if subject.kind == "strategy" and not _distributed(context):
        subject.require_partner_available()
        result = _training.run_fit(
            context.workdir, devices=1, max_steps=1, collectives=True, **subject.trainer_arguments()
        )
        assert result.collectives is not None, "run_fit(collectives=True) records them"
        records = [result.collectives]
    else:
        records = [r["collectives"] for r in _ddp_records(context)]
    for record in records:
        _check_collectives(record)
    return f"{len(records)} rank(s) agree"


def _check_collectives(record: dict[str, Any]) -> None:
    rank, world = record["rank"], record["world_size"]
    expected = {
        "is_global_zero": rank == 0,
        "broadcast": {"from": world - 1, "pad": "x" * (1 + 7 * (world - 1))},
        "all_gather_shape": [world, 2],
        "all_gather": [[float(r), 1.0] for r in range(world)],
        "reduce_sum": world * (world + 1) / 2,
        "reduce_mean": (world + 1) / 2,
        "reduce_max": float(world),
        "any": True,
        "all": world == 1,
    }
    wrong = {k: record[k] for k, v in expected.items() if record[k] != v}
    if wrong:
        raise CheckFailed(
            f"rank {rank} of {world}: " + "; ".join(f"{k} gave {wrong[k]!r}, expected {expected[k]!r}" for k in wrong)
        )
