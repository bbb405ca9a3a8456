"""``torch.autocast(device_type="tpdev")``: matmuls in the autocast dtype, reductions and losses in float32."""

from __future__ import annotations

import pytest

from tests.device_ext_support import DeviceWorker


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_autocast_runs_matmuls_in_the_lower_precision(tpdev: DeviceWorker, dtype: str) -> None:
    result = tpdev.run(
        f"""
        import torch
        from torch import nn
        x = torch.randn(4, 8, device="tpdev")
        layer = nn.Linear(8, 3).to("tpdev")
        outside = (x @ x.T).dtype
        with torch.autocast(device_type="tpdev", dtype=torch.{dtype}):
            inside = {{"mm": (x @ x.T).dtype, "linear": layer(x).dtype, "matmul": torch.matmul(x, x.T).dtype}}
            kept = {{"softmax": torch.softmax(x, dim=1).dtype, "add": (x + 1).dtype,
                     "mse_loss": nn.functional.mse_loss(layer(x), x[:, :3]).dtype}}
            loss = layer(x).float().sum()
        loss.backward()
        result = [torch.amp.is_autocast_available("tpdev"), str(outside), {{k: str(v) for k, v in inside.items()}},
                  {{k: str(v) for k, v in kept.items()}}, str(layer.weight.grad.dtype), str(layer.weight.grad.device)]
        """
    )

    available, outside, inside, kept, grad_dtype, grad_device = result
    assert available
    assert outside == "torch.float32"
    assert inside == {"mm": f"torch.{dtype}", "linear": f"torch.{dtype}", "matmul": f"torch.{dtype}"}
    assert kept == {"softmax": "torch.float32", "mse_loss": "torch.float32", "add": "torch.float32"}
    assert (grad_dtype, grad_device) == ("torch.float32", "tpdev:0")


def test_the_grad_scaler_steps_on_the_device(tpdev: DeviceWorker) -> None:
    result = tpdev.run(
        """
        import torch
        weight = torch.ones(3, device="tpdev", requires_grad=True)
        optimizer = torch.optim.SGD([weight], lr=0.1)
        scaler = torch.amp.GradScaler("tpdev", init_scale=1024.0)
        with torch.autocast(device_type="tpdev", dtype=torch.float16):
            loss = (weight * 2).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        result = [weight.detach().cpu().tolist(), scaler.get_scale()]
        """
    )

    assert result == [[0.800000011920929] * 3, 1024.0]


def test_the_device_module_lists_the_autocast_dtypes(tpdev: DeviceWorker) -> None:
    result = tpdev.run(
        """
        import torch
        result = [str(d) for d in torch.tpdev.get_amp_supported_dtype()] + [torch.tpdev.is_bf16_supported()]
        """
    )

    assert result == ["torch.bfloat16", "torch.float16", True]
