"""Cluster environment checks: pure detection, ranks under the scheduler's variables, teardown and preemption.

A scheduler's variables are not set where the checks run, so a vendor declares those of a
one-process job (``ClusterEnvironmentSuite.environment_variables``, ``core plugins verify NAME
--setenv KEY=VALUE``); the checks that need them are skipped, with that hint, otherwise.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from torchplug.testing._check import CheckFailed, CheckSkipped, check
from torchplug.testing._context import Context


def _signal_handlers() -> dict[int, Any]:
    handlers = {}
    for number in signal.valid_signals():
        try:
            handlers[int(number)] = signal.getsignal(number)
        except (ValueError, OSError):
            continue
    return handlers


def _never_detected(reason: str | None) -> bool:
    """The base class's convention for an environment a strategy brings: ``Evidence.absent("never detected: ...")``."""
    return bool(reason) and str(reason).startswith("never detected")


def _detected(context: Context) -> Any:
    """The environment's class, in a job of it: detected here, or under the variables the vendor declared.

    The check is skipped otherwise, saying how to declare a job.
    """
    subject = context.subject
    subject.require_available()
    cls = subject.load()
    if not cls.detect() and not subject.variables:
        raise CheckSkipped(
            f"not detected here ({cls.detect_reason()}): give the variables its scheduler sets for a one-process "
            "job (the suite's environment_variables, or core plugins verify NAME --setenv KEY=VALUE)"
        )
    return cls


@check(
    "cluster_environment",
    "detection",
    summary="evidence(), detect() and detect_reason() never raise, agree, and change neither variables nor signals",
    fix="implement only the classmethod evidence(): read os.environ and files, return Evidence.found(reason) or "
    "Evidence.absent(reason), and never write the environment, install handlers or import a vendor library",
)
def detection(context: Context) -> str:
    from torchplug.environments.cluster_environment import Evidence

    cls = context.subject.load()
    environ, handlers = dict(os.environ), _signal_handlers()
    evidence = cls.evidence()
    detected, reason = cls.detect(), cls.detect_reason()
    if dict(os.environ) != environ:
        changed = sorted(set(os.environ.items()) ^ set(environ.items()))
        raise CheckFailed(f"detection changed the environment variables: {changed}")
    if _signal_handlers() != handlers:
        raise CheckFailed("detection changed signal handlers")
    if not isinstance(detected, bool):
        raise CheckFailed(f"detect() returned {detected!r}, not a bool")
    if evidence is not None and not isinstance(evidence, Evidence):
        raise CheckFailed(f"evidence() returned {evidence!r}, not an Evidence or None")
    if evidence is not None and (evidence.detected, evidence.reason) != (detected, reason):
        raise CheckFailed(f"evidence() says {evidence}, but detect()/detect_reason() say {detected}/{reason!r}")
    if isinstance(cls.detect_priority, bool) or not isinstance(cls.detect_priority, int):
        raise CheckFailed(f"detect_priority is {cls.detect_priority!r}, not an int")
    return f"{'detected' if detected else 'not detected'} here: {reason}"


@check(
    "cluster_environment",
    "detected",
    summary="under the declared scheduler variables, detect() says yes with the variables that decided it",
    fix="read in evidence() the variables your scheduler always sets, and name them in the reason",
)
def detected(context: Context) -> str:
    subject = context.subject
    cls = subject.load()
    if not subject.variables:
        if cls.detect():
            return f"detected in this process's own environment: {cls.detect_reason()}"
        raise CheckSkipped(
            f"not detected here ({cls.detect_reason()}), and no scheduler variables were declared "
            "(environment_variables / --setenv KEY=VALUE)"
        )
    if not cls.detect():
        if _never_detected(cls.detect_reason()):
            return f"{cls.detect_reason()} (its strategies bring it: it is used without detection)"
        names = ", ".join(sorted(subject.variables))
        raise CheckFailed(f"with {names} set, detect() is False: {cls.detect_reason()}")
    reason = cls.detect_reason()
    if not reason:
        raise CheckFailed("detect() is True but detect_reason() gives no reason: name the variables that decided it")
    return str(reason)


@check(
    "cluster_environment",
    "ranks",
    summary="world size, ranks, main address and port, processes per node: types and ranges that make sense",
    fix="return ints (0 <= global_rank < world_size), a non-empty main_address, a main_port in 1-65535, a bool "
    "creates_processes_externally and processes_per_node() as an int or None",
)
def ranks(context: Context) -> str:
    _detected(context)
    environment = context.subject.create()
    world, rank = environment.world_size(), environment.global_rank()
    local, node = environment.local_rank(), environment.node_rank()
    problems = []
    for label, value in (
        ("world_size()", world),
        ("global_rank()", rank),
        ("local_rank()", local),
        ("node_rank()", node),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            problems.append(f"{label} is {value!r}")
    if not problems and not (world >= 1 and rank < world):
        problems.append(f"global_rank() {rank} is not below world_size() {world}")
    address, port = environment.main_address, environment.main_port
    if not isinstance(address, str) or not address:
        problems.append(f"main_address is {address!r}")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        problems.append(f"main_port is {port!r}")
    if not isinstance(environment.creates_processes_externally, bool):
        problems.append(f"creates_processes_externally is {environment.creates_processes_externally!r}")
    per_node = environment.processes_per_node()
    if per_node is not None and (isinstance(per_node, bool) or not isinstance(per_node, int) or per_node < 1):
        problems.append(f"processes_per_node() is {per_node!r}")
    if problems:
        raise CheckFailed("; ".join(problems))
    environment.teardown()
    return f"rank {rank} of {world} (local {local}, node {node}), rendezvous {address}:{port}"


@check(
    "cluster_environment",
    "validate_settings",
    summary="validate_settings() accepts the devices and nodes the scheduler allocated",
    fix="compare devices and num_nodes with the allocation and raise ValueError only when they disagree",
)
def validate_settings(context: Context) -> str:
    _detected(context)
    environment = context.subject.create()
    world = environment.world_size()
    per_node = environment.processes_per_node() or (1 if world == 1 else None)
    if per_node is None:
        raise CheckSkipped(f"processes_per_node() is None and world_size() is {world}: the allocation is unknown")
    nodes = max(1, world // per_node)
    environment.validate_settings(per_node, nodes)
    environment.teardown()
    return f"devices={per_node}, num_nodes={nodes} accepted"


@check(
    "cluster_environment",
    "teardown",
    summary="teardown() removes every environment variable the environment exported",
    fix="remember the variables you set (MASTER_ADDR, MASTER_PORT...) and restore their earlier values in teardown()",
)
def teardown(context: Context) -> str:
    _detected(context)
    before = dict(os.environ)
    environment = context.subject.create()
    environment.set_world_size(environment.world_size())
    environment.set_global_rank(environment.global_rank())
    _ = (environment.local_rank(), environment.node_rank())
    try:
        _ = (environment.main_address, environment.main_port)
    except NotImplementedError:  # refusing them is the ranks check's finding, not this one's
        pass
    exported = sorted(k for k in os.environ if os.environ.get(k) != before.get(k))
    environment.teardown()
    left = sorted(set(os.environ.items()) ^ set(before.items()))
    if left:
        raise CheckFailed(f"after teardown(), the environment still differs: {left}")
    return f"restored {', '.join(exported)}" if exported else "exports nothing"


@check(
    "cluster_environment",
    "preemption",
    summary="setup_preemption() returns a bool, no notice is pending, and teardown_preemption() restores signals",
    fix="install signal handlers only in setup_preemption(), keep preemption_requested() a flag read, and "
    "restore the previous handlers in teardown_preemption()",
)
def preemption(context: Context) -> str:
    from torchplug.io.torch_io import TorchCheckpointIO

    _detected(context)
    environment = context.subject.create()
    handlers = _signal_handlers()
    watching = environment.setup_preemption()
    try:
        if not isinstance(watching, bool):
            raise CheckFailed(f"setup_preemption() returned {watching!r}, not a bool")
        if environment.preemption_requested() is not False:
            raise CheckFailed("preemption_requested() is not False before any notice arrived")
    finally:
        environment.teardown_preemption()
    if _signal_handlers() != handlers:
        raise CheckFailed("teardown_preemption() left signal handlers changed")
    path = environment.preemption_checkpoint_path(str(context.workdir))
    resume = environment.resume_checkpoint_path(str(context.workdir), TorchCheckpointIO())
    if not isinstance(path, str) or not (resume is None or isinstance(resume, str)):
        raise CheckFailed(f"preemption_checkpoint_path() gave {path!r}, resume_checkpoint_path() {resume!r}")
    environment.teardown()
    return f"watches for preemption: {watching}; checkpoint path {os.path.basename(path)}"
