"""Tensors on ``tpdev``: copies to and from the device, views that alias device memory, operators
that fall back to the CPU and leave their results on the device, in-place and ``out=`` forms."""

from __future__ import annotations

import pytest

from tests.device_ext_support import DeviceWorker

DTYPES = ["float32", "float64", "float16", "bfloat16", "int64", "int32", "uint8", "bool", "complex64"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_tensor_goes_to_the_device_and_comes_back_unchanged(tpdev: DeviceWorker, dtype: str) -> None:
    result = tpdev.run(
        f"""
        import torch
        source = (torch.arange(12).reshape(3, 4) * 7 % 5).to(torch.{dtype})
        on_device = source.to("tpdev")
        back = on_device.cpu()
        result = [str(on_device.device), str(on_device.dtype), torch.equal(back, source), back.shape == source.shape]
        """
    )

    assert result == ["tpdev:0", f"torch.{dtype}", True, True]


def test_tensors_move_between_devices_and_stay_where_they_are_put(tpdev: DeviceWorker) -> None:
    result = tpdev.run(
        """
        import torch
        first = torch.arange(6.0, device="tpdev:1")
        second = first.to("tpdev:0")
        third = (first * 2).to("tpdev:1")
        result = [str(first.device), str(second.device), str(third.device), second.cpu().tolist(), third.cpu().tolist()]
        """
    )

    assert result == ["tpdev:1", "tpdev:0", "tpdev:1", [0.0, 1.0, 2.0, 3.0, 4.0, 5.0], [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]]


def test_views_share_device_memory(tpdev: DeviceWorker) -> None:
    result = tpdev.run(
        """
        import torch
        base = torch.zeros(4, 6, device="tpdev")
        views = [base.view(6, 4), base.t(), base[1:3, 2:], base.unsqueeze(0), base.as_strided((2, 2), (6, 1), 7),
                 base.reshape(24), base.unfold(1, 2, 2), base.narrow(0, 1, 2), base.select(1, 0), base.expand(2, 4, 6)]
        same = [v.untyped_storage().data_ptr() == base.untyped_storage().data_ptr() for v in views]
        base[1:3, 2:].fill_(5.0)
        views[0][0, 0] = -1.0
        result = same + [base.sum().item(), base[0, 0].item(), views[2].cpu().sum().item()]
        """
    )

    assert result == [True] * 10 + [39.0, -1.0, 40.0]


def test_operators_run_on_the_cpu_and_their_results_stay_on_the_device(tpdev: DeviceWorker) -> None:
    result = tpdev.run(
        """
        import torch
        cpu = torch.linspace(-2, 2, 12).reshape(3, 4)
        device = cpu.to("tpdev")
        pairs = {
            "add": (device + 1, cpu + 1),
            "rsub": (1 - device, 1 - cpu),  # a wrapped CPU scalar comes first: sub(scalar, tensor)
            "matmul": (device @ device.T, cpu @ cpu.T),
            "sum": (device.sum(dim=1), cpu.sum(dim=1)),
            "mask": (device[device > 0], cpu[cpu > 0]),
            "nonzero": (device.nonzero(), cpu.nonzero()),
            "sort": (device.sort(dim=1).values, cpu.sort(dim=1).values),
            "cat": (torch.cat([device, device]), torch.cat([cpu, cpu])),
            "index": (device[torch.tensor([2, 0])], cpu[torch.tensor([2, 0])]),
            "softmax": (device.softmax(dim=0), cpu.softmax(dim=0)),
        }
        result = {name: [str(d.device), torch.equal(d.cpu(), c)] for name, (d, c) in pairs.items()}
        """
    )

    assert result == {name: ["tpdev:0", True] for name in result}
    assert len(result) == 10


def test_in_place_and_out_forms_write_into_device_tensors(tpdev: DeviceWorker) -> None:
    result = tpdev.run(
        """
        import torch
        x = torch.ones(3, device="tpdev")
        x.add_(2).mul_(3)
        out = torch.empty(0, device="tpdev")
        torch.add(x, x, out=out)  # resized from 0 elements
        z = torch.arange(4.0, device="tpdev")
        z.zero_()
        result = [x.cpu().tolist(), out.cpu().tolist(), str(out.device), z.cpu().tolist()]
        """
    )

    assert result == [[9.0, 9.0, 9.0], [18.0, 18.0, 18.0], "tpdev:0", [0.0, 0.0, 0.0, 0.0]]


def test_complex_conjugate_and_negative_views_are_copied_resolved(tpdev: DeviceWorker) -> None:
    result = tpdev.run(
        """
        import torch
        c = torch.tensor([1 + 2j, 3 - 4j]).to("tpdev")
        real = torch.view_as_real(c)
        result = [str(c.conj().cpu().tolist()), str(c.conj().clone().cpu().tolist()),
                  str(c._neg_view().cpu().tolist()), str(real.device), real.cpu().tolist()]
        """
    )

    assert result == [
        "[(1-2j), (3+4j)]",
        "[(1-2j), (3+4j)]",
        "[(-1-2j), (-3+4j)]",
        "tpdev:0",
        [[1.0, 2.0], [3.0, -4.0]],
    ]


def test_resizing_a_tensor_or_a_storage_keeps_its_contents(tpdev: DeviceWorker) -> None:
    result = tpdev.run(
        """
        import torch
        t = torch.arange(4.0, device="tpdev")
        t.resize_(8)
        storage = torch.UntypedStorage(16, device="tpdev")
        storage.resize_(64)
        result = [t[:4].cpu().tolist(), list(t.shape), str(storage.device), storage.nbytes()]
        """
    )

    assert result == [[0.0, 1.0, 2.0, 3.0], [8], "tpdev:0", 64]


def test_a_device_that_does_not_exist_is_refused_with_the_count(tpdev: DeviceWorker) -> None:
    message = tpdev.run(
        """
        import torch
        try:
            torch.empty(1, device="tpdev:2")
        except RuntimeError as error:
            result = str(error).splitlines()[0]
        """
    )

    assert message == (
        "tpdev:2 does not exist: there are 2 tpdev devices (indices 0 to 1; TPDEV_DEVICE_COUNT sets how many)."
    )


def test_memory_stats_grow_with_allocations_and_shrink_when_tensors_are_freed(tpdev: DeviceWorker) -> None:
    result = tpdev.run(
        """
        import gc, torch
        gc.collect()
        torch.tpdev.reset_peak_memory_stats(0)
        before = torch.tpdev.memory_allocated(0)
        other_before = torch.tpdev.memory_allocated(1)
        block = torch.empty(1 << 20, dtype=torch.float32, device="tpdev:0")  # 4 MiB
        during = torch.tpdev.memory_allocated(0)
        accelerator_view = torch.accelerator.memory_allocated(0)
        del block
        after = torch.tpdev.memory_allocated(0)
        peak = torch.tpdev.max_memory_allocated(0)
        torch.tpdev.reset_peak_memory_stats(0)
        result = [during - before, accelerator_view == during, after == before, peak - before,
                  torch.tpdev.max_memory_allocated(0) == after, torch.tpdev.memory_allocated(1) == other_before,
                  sorted(torch.tpdev.memory_stats(0))]
        """
    )

    grown, agrees, shrunk, peak, reset, other_device_untouched, keys = result
    assert grown == 4 << 20
    assert agrees and shrunk and reset and other_device_untouched
    assert peak == 4 << 20
    assert "allocated_bytes.all.current" in keys and "allocation.all.peak" in keys
