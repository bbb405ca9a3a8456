"""Exporting a Module: TorchScript and ONNX, with the module's example input moved as a batch would be."""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from torchplug.core.module import Module

__all__ = ["example_inputs", "to_onnx", "to_torchscript"]


@contextlib.contextmanager
def _eval_mode(module: torch.nn.Module) -> Iterator[None]:
    """Evaluation mode inside the block, the module's own mode (and its submodules') restored after it."""
    modes = {m: m.training for m in module.modules()}
    module.eval()
    try:
        yield
    finally:
        for submodule, training in modes.items():
            submodule.training = training


def example_inputs(module: Module, given: Any, what: str) -> Any:
    """``given``, else the module's ``example_input_array``, moved to the module's device as a batch would be."""
    sample = given if given is not None else module.example_input_array
    if sample is None:
        raise ValueError(
            f"{type(module).__name__}.{what} needs an example input: pass one, or set "
            "self.example_input_array = torch.randn(...) in __init__."
        )
    batch = module.on_before_batch_transfer(sample, 0)
    batch = module.transfer_batch_to_device(batch, module.device, 0)
    return module.on_after_batch_transfer(batch, 0)


def _write(path: str | os.PathLike[str], write: Any) -> None:
    import fsspec

    with fsspec.open(os.fspath(path), "wb") as out:
        write(out)


def to_torchscript(
    module: Module,
    file_path: str | os.PathLike[str] | None,
    method: str,
    example: Any,
    **kwargs: Any,
) -> Any:
    """The module compiled by ``torch.jit.script`` (``method="script"``) or traced (``"trace"``), in eval mode."""
    if method not in ("script", "trace"):
        raise ValueError(f"to_torchscript(method={method!r}): choose 'script' or 'trace'.")
    inputs = example_inputs(module, example, "to_torchscript(method='trace')") if method == "trace" else None
    module._jit_is_scripting = True
    try:
        with _eval_mode(module), torch.no_grad():
            if method == "script":
                scripted = torch.jit.script(module, **kwargs)
            else:
                scripted = torch.jit.trace(module, example_inputs=inputs, **kwargs)
    finally:
        module._jit_is_scripting = False
    if file_path is not None:
        _write(file_path, lambda out: torch.jit.save(scripted, out))
    return scripted


def to_onnx(module: Module, file_path: str | os.PathLike[str] | None, input_sample: Any, **kwargs: Any) -> Any:
    """Export ``module`` to ONNX with ``torch.onnx.export`` (which needs the ``onnx`` and ``onnxscript`` packages)."""
    missing = [name for name in ("onnx", "onnxscript") if importlib.util.find_spec(name) is None]
    if missing:
        raise ModuleNotFoundError(
            f"{type(module).__name__}.to_onnx needs {' and '.join(missing)}, which torch.onnx.export uses. "
            "Hint: pip install 'core[onnx]'"
        )
    inputs = example_inputs(module, input_sample, "to_onnx")
    args = inputs if isinstance(inputs, tuple) else (inputs,)
    with _eval_mode(module):
        return torch.onnx.export(module, args, None if file_path is None else os.fspath(file_path), **kwargs)
