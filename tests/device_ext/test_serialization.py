"""``torch.save``/``torch.load`` of device tensors: checkpoints keep their device, or go where
``map_location`` sends them."""

from __future__ import annotations

import pytest

from tests.device_ext_support import DeviceWorker

SAVE = """
import io, torch
from torch import nn
torch.manual_seed(0)
model = nn.Linear(4, 2).to("tpdev:1")
optimizer = torch.optim.Adam(model.parameters())
model(torch.ones(3, 4, device="tpdev:1")).sum().backward()
optimizer.step()
checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": 1}
buffer = io.BytesIO()
torch.save(checkpoint, buffer)

def tensors(tree):
    if isinstance(tree, torch.Tensor):
        yield tree
    elif isinstance(tree, dict):
        for value in tree.values():
            yield from tensors(value)
    elif isinstance(tree, (list, tuple)):
        for value in tree:
            yield from tensors(value)

def same(a, b):
    return all(torch.equal(x.cpu(), y.cpu()) for x, y in zip(tensors(a), tensors(b)))
"""


@pytest.mark.parametrize(
    ("map_location", "devices"),
    [
        # Adam keeps its step counts on the CPU: they stay there unless map_location moves everything.
        pytest.param(None, ["cpu", "tpdev:1"], id="where-it-was-saved"),
        pytest.param('"cpu"', ["cpu"], id="cpu"),
        pytest.param('"tpdev:0"', ["tpdev:0"], id="other-device"),
        pytest.param('{"tpdev:1": "tpdev:0"}', ["cpu", "tpdev:0"], id="mapping"),
    ],
)
def test_a_device_checkpoint_loads_where_map_location_says(
    tpdev: DeviceWorker, map_location: str | None, devices: list[str]
) -> None:
    result = tpdev.run(
        SAVE
        + f"""
buffer.seek(0)
loaded = torch.load(buffer, map_location={map_location})  # weights_only=True, torch's default
result = [sorted({{str(t.device) for t in tensors(loaded)}}), same(loaded, checkpoint), loaded["step"]]
"""
    )

    assert result == [devices, True, 1]


def test_a_cpu_checkpoint_loads_onto_the_device_and_resumes_training(tpdev: DeviceWorker) -> None:
    result = tpdev.run(
        SAVE
        + """
buffer.seek(0)
on_cpu = torch.load(buffer, map_location="cpu")
again = io.BytesIO()
torch.save(on_cpu, again)
again.seek(0)
resumed_model = nn.Linear(4, 2).to("tpdev")
resumed_optimizer = torch.optim.Adam(resumed_model.parameters())
state = torch.load(again, map_location="tpdev")
resumed_model.load_state_dict(state["model"])
resumed_optimizer.load_state_dict(state["optimizer"])
for net, opt, device in ((model, optimizer, "tpdev:1"), (resumed_model, resumed_optimizer, "tpdev:0")):
    opt.zero_grad()
    net(torch.ones(3, 4, device=device)).sum().backward()
    opt.step()
result = [same(model.state_dict(), resumed_model.state_dict()), str(resumed_model.weight.device),
          sorted({str(s.device) for s in resumed_optimizer.state[resumed_model.weight].values()})]
"""
    )

    assert result == [True, "tpdev:0", ["tpdev:0"]]


def test_loading_onto_a_missing_device_names_it(tpdev: DeviceWorker) -> None:
    message = tpdev.run(
        SAVE
        + """
buffer.seek(0)
try:
    torch.load(buffer, map_location="tpdev:5")
except RuntimeError as error:
    result = str(error)
"""
    )

    assert "tpdev:5" in message or "TPDEV device 5" in message
