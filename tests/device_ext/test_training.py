"""A small MLP trains on ``tpdev`` exactly as on the CPU: same seed, same numbers, every step."""

from __future__ import annotations

import pytest

from tests.device_ext_support import DeviceWorker

TRAIN = """
import torch
from torch import nn

def train(device, optimizer_name):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 1)).to(device)
    optimizers = {{
        "sgd": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
        "adam": lambda p: torch.optim.Adam(p, lr=0.01),
        "adamw-single-tensor": lambda p: torch.optim.AdamW(p, lr=0.01, foreach=False),
    }}
    optimizer = optimizers[optimizer_name](model.parameters())
    data = torch.Generator().manual_seed(1)
    losses, placement = [], set()
    for _ in range(6):
        x, y = torch.randn(16, 8, generator=data).to(device), torch.randn(16, 1, generator=data).to(device)
        loss = nn.functional.mse_loss(model(x), y)  # dropout draws from the device's generator
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        placement |= {{p.device.type for p in model.parameters()}} | {{p.grad.device.type for p in model.parameters()}}
        placement |= {{s.device.type for state in optimizer.state.values() for s in state.values() if s.dim() > 0}}
    weights = {{k: v.cpu() for k, v in model.state_dict().items()}}
    return losses, weights, sorted(placement)

cpu_losses, cpu_weights, _ = train("cpu", "{optimizer}")
losses, weights, placement = train("tpdev", "{optimizer}")
result = [losses == cpu_losses, all(torch.equal(weights[k], cpu_weights[k]) for k in cpu_weights), placement,
          losses[-1] < losses[0]]
"""


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adamw-single-tensor"])
def test_an_mlp_trains_on_the_device_exactly_as_on_the_cpu(tpdev: DeviceWorker, optimizer: str) -> None:
    same_losses, same_weights, placement, learned = tpdev.run(TRAIN.format(optimizer=optimizer))

    assert same_losses and same_weights
    assert placement == ["tpdev"]  # parameters, gradients and optimizer state all lived on the device
    assert learned


def test_a_module_built_on_the_device_gets_the_same_initial_weights_as_on_the_cpu(tpdev: DeviceWorker) -> None:
    result = tpdev.run(
        """
        import torch
        from torch import nn
        torch.manual_seed(7)
        on_cpu = nn.Linear(5, 3)
        torch.manual_seed(7)
        with torch.device("tpdev"):
            on_device = nn.Linear(5, 3)
        result = [str(on_device.weight.device), torch.equal(on_device.weight.cpu(), on_cpu.weight),
                  torch.equal(on_device.bias.cpu(), on_cpu.bias)]
        """
    )

    assert result == ["tpdev:0", True, True]


def test_a_convolutional_network_trains_on_the_device_like_on_the_cpu(tpdev: DeviceWorker) -> None:
    result = tpdev.run(
        """
        import copy, torch
        from torch import nn
        torch.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                              nn.ConvTranspose2d(4, 2, 2, stride=2), nn.Flatten(), nn.Linear(2 * 8 * 8, 1))
        on_device = copy.deepcopy(model).to("tpdev")
        x = torch.randn(4, 3, 8, 8)
        for net, inputs in ((model, x), (on_device, x.to("tpdev"))):
            net(inputs).pow(2).mean().backward()
        grads_match = all(torch.allclose(a.grad, b.grad.cpu(), rtol=1e-5, atol=1e-6)
                          for a, b in zip(model.parameters(), on_device.parameters()))
        stats_match = torch.allclose(model[1].running_var, on_device[1].running_var.cpu())
        result = [grads_match, stats_match, str(on_device[1].running_mean.device)]
        """
    )

    assert result == [True, True, "tpdev:0"]
