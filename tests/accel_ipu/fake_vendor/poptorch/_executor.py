"""poptorch.PoplarExecutor: a compiled model that holds its own copy of the weights, as the IPUs do.

The model compiles on its first call (or ``compile()``), taking the host's weights and the IPUs.
From then on it computes with its own copy: training updates that copy (forward, backward and the
optimizer step, with micro-batches, gradient accumulation and replicas as PopTorch does them, the
gradients averaged), and the host's weights change only on ``copyWeightsToHost()``; the host's
changes reach the copy only on ``copyWeightsToDevice()``. Only one model holds the IPUs at a time.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.func import functional_call

from poptorch import _fake
from poptorch._options import Options


class PoplarExecutor:
    def __init__(
        self,
        model: torch.nn.Module,
        options: Options | None,
        training: bool,
        optimizer: torch.optim.Optimizer | None = None,
    ) -> None:
        if training and optimizer is None:
            raise ValueError("trainingModel needs an optimizer")
        self._user_model = model
        self._options = options if options is not None else Options()
        self._options._freeze()
        self.training = training
        self._host_optimizer = optimizer
        self._device: dict[str, torch.Tensor] | None = None
        self._optimizer: torch.optim.Optimizer | None = None
        self._attached = False
        self.calls = 0
        _fake.executors.append(self)

    # -- state ----------------------------------------------------------------------------------

    def isCompiled(self) -> bool:
        return self._device is not None

    def isAttachedToDevice(self) -> bool:
        return self._attached

    def _host(self) -> dict[str, torch.Tensor]:
        return {**dict(self._user_model.named_parameters()), **dict(self._user_model.named_buffers())}

    def compile(self, *args: Any, **kwargs: Any) -> None:
        _fake.claim(self)
        _fake.record(f"compile:{'training' if self.training else 'inference'}")
        host = self._host()
        with torch.inference_mode(False), torch.no_grad():
            params = dict(self._user_model.named_parameters())
            self._device = {
                name: t.detach().clone().requires_grad_(self.training and name in params) for name, t in host.items()
            }
        if self.training:
            self._optimizer = self._device_optimizer()
        self._attached = True

    def _device_optimizer(self) -> torch.optim.Optimizer:
        assert self._host_optimizer is not None and self._device is not None
        by_id = {id(p): self._device[name] for name, p in self._user_model.named_parameters()}
        groups = [
            {**{k: v for k, v in group.items() if k != "params"}, "params": [by_id[id(p)] for p in group["params"]]}
            for group in self._host_optimizer.param_groups
        ]
        return type(self._host_optimizer)(groups, **self._host_optimizer.defaults)

    def attachToDevice(self) -> None:
        if not self.isCompiled():
            raise RuntimeError("attachToDevice: the model must be compiled first")
        if self._attached:
            raise RuntimeError("attachToDevice: the model is already attached")
        _fake.claim(self)
        _fake.record("attach")
        self._attached = True

    def detachFromDevice(self) -> None:
        if not self._attached:
            raise RuntimeError("detachFromDevice: the model is not attached")
        _fake.release(self)
        _fake.record("detach")
        self._attached = False

    def copyWeightsToHost(self) -> None:
        self._check_ready("copyWeightsToHost")
        assert self._device is not None
        _fake.record("copyWeightsToHost")
        with torch.no_grad():
            for name, tensor in self._host().items():
                tensor.copy_(self._device[name])

    def copyWeightsToDevice(self) -> None:
        self._check_ready("copyWeightsToDevice")
        assert self._device is not None
        _fake.record("copyWeightsToDevice")
        with torch.inference_mode(False), torch.no_grad():
            for name, tensor in self._host().items():
                self._device[name].copy_(tensor)

    def setOptimizer(self, optimizer: torch.optim.Optimizer) -> None:
        _fake.record("setOptimizer")
        self._host_optimizer = optimizer
        if self._optimizer is not None:
            for mine, theirs in zip(self._optimizer.param_groups, optimizer.param_groups):
                mine.update({k: v for k, v in theirs.items() if k != "params"})

    def destroy(self) -> None:
        if self._attached:
            self.detachFromDevice()
        _fake.record("destroy")
        self._device = None
        self._optimizer = None

    def _check_ready(self, what: str) -> None:
        if not self.isCompiled():
            raise RuntimeError(f"{what}: the model must be compiled first")
        if not self._attached:
            raise RuntimeError(f"{what}: the model is not attached to the IPUs")

    # -- running ----------------------------------------------------------------------------------

    @property
    def _micro_batches(self) -> int:
        options = self._options
        return options.device_iterations * options.replication_factor * options.Training.gradient_accumulation

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self.isCompiled():
            self.compile(*args, **kwargs)
        elif not self._attached:
            raise RuntimeError("The model is not attached to the IPUs: call attachToDevice() first")
        self.calls += 1
        chunks = _split((args, kwargs), self._micro_batches)
        return self._train(chunks) if self.training else self._infer(chunks)

    def _forward(self, chunk: Any) -> Any:
        assert self._device is not None
        args, kwargs = chunk
        return functional_call(self._user_model, self._device, tuple(args), dict(kwargs), strict=True)

    def _train(self, chunks: list[Any]) -> torch.Tensor:
        assert self._optimizer is not None
        options = self._options
        replicas, accumulation = options.replication_factor, options.Training.gradient_accumulation
        per_step = replicas * accumulation
        losses: list[torch.Tensor] = []
        with torch.inference_mode(False), torch.enable_grad():
            for start in range(0, len(chunks), per_step):
                self._optimizer.zero_grad(set_to_none=True)
                losses = []
                for chunk in chunks[start : start + per_step]:
                    _fake.loss = None
                    loss = self._forward(chunk)
                    if loss is not _fake.loss:
                        raise RuntimeError("A training model must return its loss, marked with poptorch.identity_loss")
                    (loss.float() / per_step).backward()  # replicas and accumulation: gradients averaged
                    losses.append(loss.detach().float())
                self._optimizer.step()
        final = torch.stack(losses).view(replicas, accumulation).mean(dim=1)
        return final[0] if replicas == 1 else final

    def _infer(self, chunks: list[Any]) -> Any:
        with torch.no_grad():
            outputs = [self._forward(chunk) for chunk in chunks]
        return _combine(outputs)


def _split(data: Any, count: int) -> list[Any]:
    """Split every tensor of ``data`` along its first dimension into ``count`` micro-batches."""
    if isinstance(data, torch.Tensor):
        if data.dim() == 0 or data.shape[0] % count:
            raise ValueError(
                f"An input of shape {tuple(data.shape)} cannot be split into {count} micro-batches: "
                "its first dimension must be a multiple of device_iterations x replicas x accumulation"
            )
        return list(data.chunk(count))
    if isinstance(data, (list, tuple)):
        parts = [_split(item, count) for item in data]
        return [type(data)(part[i] for part in parts) for i in range(count)]
    if isinstance(data, dict):
        split = {key: _split(value, count) for key, value in data.items()}
        return [{key: value[i] for key, value in split.items()} for i in range(count)]
    return [data] * count


def _combine(outputs: list[Any]) -> Any:
    """Every micro-batch's outputs, joined along the first dimension (OutputMode.All)."""
    first = outputs[0]
    if first is None:
        return None
    if isinstance(first, torch.Tensor):
        return torch.stack(outputs) if first.dim() == 0 else torch.cat(outputs)
    if isinstance(first, (list, tuple)):
        return type(first)(_combine([o[i] for o in outputs]) for i in range(len(first)))
    if isinstance(first, dict):
        return {key: _combine([o[key] for o in outputs]) for key in first}
    return outputs
