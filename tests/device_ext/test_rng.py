"""Random numbers on ``tpdev``: a default generator per device, seeded by ``torch.manual_seed``, whose
state can be saved and restored (``torch.tpdev.get_rng_state``/``set_rng_state``, ``fork_rng``)."""

from __future__ import annotations

from tests.device_ext_support import DeviceWorker


def test_restoring_the_rng_state_repeats_the_numbers(tpdev: DeviceWorker) -> None:
    result = tpdev.run(
        """
        import torch
        state = torch.tpdev.get_rng_state()
        first = torch.randn(5, device="tpdev").cpu()
        torch.tpdev.set_rng_state(state)
        second = torch.randn(5, device="tpdev").cpu()
        all_states = torch.tpdev.get_rng_state_all()
        third = torch.rand(3, device="tpdev:1").cpu()
        torch.tpdev.set_rng_state_all(all_states)
        fourth = torch.rand(3, device="tpdev:1").cpu()
        result = [torch.equal(first, second), torch.equal(third, fourth), state.dtype == torch.uint8, state.device.type]
        """
    )

    assert result == [True, True, True, "cpu"]


def test_torch_manual_seed_seeds_the_device_like_the_cpu(tpdev: DeviceWorker) -> None:
    result = tpdev.run(
        """
        import torch
        torch.manual_seed(1234)
        on_device = [torch.randn(4, device="tpdev:0").cpu(), torch.randn(4, device="tpdev:1").cpu()]
        torch.manual_seed(1234)
        on_cpu = torch.randn(4)
        result = [torch.equal(on_device[0], on_cpu), torch.equal(on_device[1], on_cpu), torch.tpdev.initial_seed()]
        """
    )

    assert result == [True, True, 1234]


def test_each_device_has_its_own_generator(tpdev: DeviceWorker) -> None:
    result = tpdev.run(
        """
        import torch
        torch.tpdev.manual_seed_all(5)
        state = torch.tpdev.get_rng_state(0)
        torch.rand(100, device="tpdev:1")  # draws from device 1 only
        untouched = torch.equal(torch.tpdev.get_rng_state(0), state)
        before_cpu = torch.get_rng_state()
        torch.rand(100, device="tpdev:0")
        result = [untouched, torch.equal(torch.get_rng_state(), before_cpu)]
        """
    )

    assert result == [True, True]


def test_an_explicit_device_generator_draws_its_own_stream(tpdev: DeviceWorker) -> None:
    result = tpdev.run(
        """
        import torch
        generator = torch.Generator(device="tpdev")
        generator.manual_seed(99)
        default_state = torch.tpdev.get_rng_state()
        first = torch.randn(3, device="tpdev", generator=generator).cpu()
        generator.manual_seed(99)
        second = torch.empty(3, device="tpdev").normal_(generator=generator).cpu()
        result = [str(generator.device), torch.equal(first, second),
                  torch.equal(torch.tpdev.get_rng_state(), default_state)]
        """
    )

    assert result == ["tpdev:0", True, True]


def test_fork_rng_restores_the_device_state(tpdev: DeviceWorker) -> None:
    result = tpdev.run(
        """
        import torch
        torch.manual_seed(3)
        with torch.random.fork_rng(device_type="tpdev"):
            torch.randn(10, device="tpdev")
        after_fork = torch.randn(2, device="tpdev").cpu()
        torch.manual_seed(3)
        fresh = torch.randn(2, device="tpdev").cpu()
        result = torch.equal(after_fork, fresh)
        """
    )

    assert result is True


def test_seeds_use_all_64_bits(tpdev: DeviceWorker) -> None:
    result = tpdev.run(
        """
        import torch
        torch.tpdev.manual_seed((1 << 64) - 1)
        result = torch.tpdev.initial_seed()
        """
    )

    assert result == (1 << 64) - 1
