"""poptorch.Options: the settings of a compiled model, frozen once a DataLoader uses them."""

from __future__ import annotations

from typing import Any

import torch


class _Group:
    def __init__(self, owner: Options) -> None:
        self._owner = owner


class _Training(_Group):
    def __init__(self, owner: Options) -> None:
        super().__init__(owner)
        self.gradient_accumulation = 1

    def gradientAccumulation(self, count: int) -> Options:
        self._owner._check_writable()
        self.gradient_accumulation = int(count)
        return self._owner


class _Precision(_Group):
    def __init__(self, owner: Options) -> None:
        super().__init__(owner)
        self.partials_type: torch.dtype | None = None
        self.stochastic_rounding = False

    def setPartialsType(self, dtype: torch.dtype) -> Options:
        self._owner._check_writable()
        if dtype not in (torch.float16, torch.float32):
            raise ValueError(f"partials type must be torch.float16 or torch.float32, not {dtype}")
        self.partials_type = dtype
        return self._owner

    def enableStochasticRounding(self, enabled: bool) -> Options:
        self._owner._check_writable()
        self.stochastic_rounding = bool(enabled)
        return self._owner


class _Distributed(_Group):
    def __init__(self, owner: Options) -> None:
        super().__init__(owner)
        self.numProcesses = 1
        self.processId = 0


class Options:
    """Device iterations, replication, gradient accumulation, precision and the random seed."""

    def __init__(self) -> None:
        self.device_iterations = 1
        self.replication_factor = 1
        self.random_seed: int | None = None
        self._frozen = False
        self.Training = _Training(self)
        self.Precision = _Precision(self)
        self.Distributed = _Distributed(self)

    def _check_writable(self) -> None:
        if self._frozen:
            raise AttributeError("Options are frozen once used by a DataLoader or a model and cannot be modified")

    def _freeze(self) -> None:
        self._frozen = True

    def deviceIterations(self, count: int) -> Options:
        self._check_writable()
        self.device_iterations = int(count)
        return self

    def replicationFactor(self, count: int) -> Options:
        self._check_writable()
        self.replication_factor = int(count)
        return self

    def randomSeed(self, seed: int) -> Options:
        self._check_writable()
        self.random_seed = int(seed)
        return self

    def exists(self, name: str) -> bool:
        return getattr(self, name, None) is not None

    def toDict(self) -> dict[str, Any]:
        return {
            "device_iterations": self.device_iterations,
            "replication_factor": self.replication_factor,
            "gradient_accumulation": self.Training.gradient_accumulation,
            "random_seed": self.random_seed,
            "partials_type": self.Precision.partials_type,
            "stochastic_rounding": self.Precision.stochastic_rounding,
        }
