"""What generic code asks torch about the current accelerator, answered for ``tpdev``: ``torch.accelerator``,
``torch.get_device_module``, the distributed backend, the generated ``Tensor.tpdev()`` family."""

from __future__ import annotations

from tests.device_ext_support import DeviceWorker


def test_torch_accelerator_reports_the_device(tpdev: DeviceWorker) -> None:
    result = tpdev.run(
        """
        import torch
        accelerator = torch.accelerator.current_accelerator(check_available=True)
        result = {
            "type": accelerator.type,
            "count": torch.accelerator.device_count(),
            "available": torch.accelerator.is_available(),
            "index": torch.accelerator.current_device_index(),
            "module": torch.get_device_module(accelerator).__name__,
            "stream": str(torch.accelerator.current_stream().device),
            "autocast": torch.amp.is_autocast_available(accelerator.type),
            "distributed": torch.distributed.get_default_backend_for_device(accelerator),
        }
        """
    )

    assert result == {
        "type": "tpdev",
        "count": 2,
        "available": True,
        "index": 0,
        "module": "torchplug_testdevice.device",
        "stream": "tpdev:0",
        "autocast": True,
        "distributed": "tpgloo",
    }


def test_the_current_device_decides_where_index_less_tensors_go(tpdev: DeviceWorker) -> None:
    result = tpdev.run(
        """
        import torch
        placed = []
        torch.accelerator.set_device_index(1)
        placed.append(str(torch.empty(1, device="tpdev").device))
        torch.accelerator.set_device_index(0)
        with torch.accelerator.device_index(1):
            placed.append(str(torch.ones(1, device="tpdev").device))
        with torch.tpdev.device(1):
            placed.append(torch.tpdev.current_device())
        placed.append(torch.tpdev.current_device())
        torch.tpdev.set_device("tpdev:1")
        placed.append(torch.accelerator.current_device_index())
        torch.tpdev.set_device(0)
        result = placed
        """
    )

    assert result == ["tpdev:1", "tpdev:1", 1, 0, 1]


def test_synchronize_events_and_memory_go_through_torch_accelerator(tpdev: DeviceWorker) -> None:
    result = tpdev.run(
        """
        import torch
        x = torch.ones(256, device="tpdev")
        event = torch.Event(device="tpdev")
        event.record()
        event.synchronize()
        torch.accelerator.synchronize()
        torch.tpdev.synchronize()
        stats = torch.accelerator.memory_stats(0)
        free, total = torch.accelerator.get_memory_info(0)
        result = [event.query(), stats["allocated_bytes.all.current"] == torch.tpdev.memory_allocated(0),
                  torch.accelerator.max_memory_allocated(0) >= torch.accelerator.memory_allocated(0) >= 1024,
                  0 < free <= total]
        """
    )

    assert result == [True, True, True, True]


def test_generated_methods_move_tensors_modules_and_storages(tpdev: DeviceWorker) -> None:
    result = tpdev.run(
        """
        import torch
        from torch import nn
        tensor = torch.ones(2).tpdev()
        module = nn.Linear(2, 2).tpdev(1)
        storage = torch.UntypedStorage(8).tpdev()
        result = [tensor.is_tpdev, str(tensor.device), str(module.weight.device), storage.is_tpdev, str(storage.device),
                  torch.tpdev.get_device_name(0)]
        """
    )

    assert result == [True, "tpdev:0", "tpdev:1", True, "tpdev:0", "torchplug test device (host memory)"]
