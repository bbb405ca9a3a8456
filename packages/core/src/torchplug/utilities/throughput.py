"""Throughput: batches, samples, items and FLOPs per second over a sliding window, and FLOPs of a model.

:class:`Throughput` is what :class:`torchplug.callbacks.ThroughputMonitor` computes; use it in
your own loop too. :func:`measure_flops` counts the FLOPs of one forward (and backward).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import torch

__all__ = ["Throughput", "measure_flops"]


class Throughput:
    """Rates over the last ``window_size`` updates, per device and (with several processes) for all of them.

    Call :meth:`update` after each batch with running totals; :meth:`compute` returns:

    - ``time``, ``batches``, ``samples`` (and ``lengths``): the totals of the last update;
    - ``device/batches_per_sec``, ``device/samples_per_sec`` (``device/items_per_sec`` with
      lengths), once the window is full; ``batches_per_sec``, ``samples_per_sec``,
      ``items_per_sec``: the same times ``world_size``, when it is above 1;
    - ``device/flops_per_sec`` (and ``flops_per_sec``), with FLOPs, once the window is full, and
      ``device/mfu`` (model FLOPs utilisation) when ``available_flops`` is known.

    Example::

        throughput = Throughput(window_size=10)
        start = time.perf_counter()
        for i, batch in enumerate(loader, 1):
            step(batch)
            throughput.update(time=time.perf_counter() - start, batches=i, samples=i * len(batch))
        print(throughput.compute())

    Args:
        available_flops: The peak FLOPs per second of one device (for ``device/mfu``).
        world_size: The number of processes, each processing the same amounts.
        window_size: How many updates the rates are computed over (at least 2).
        separator: Between ``device`` and the metric name.

    Raises:
        ValueError: ``world_size`` below 1 or ``window_size`` below 2.
    """

    def __init__(
        self, available_flops: float | None = None, world_size: int = 1, window_size: int = 100, separator: str = "/"
    ) -> None:
        if world_size < 1:
            raise ValueError(f"Throughput(world_size={world_size!r}): give an int >= 1.")
        if window_size < 2:
            raise ValueError(f"Throughput(window_size={window_size!r}): give an int >= 2.")
        self.available_flops = available_flops
        self.world_size = world_size
        self.separator = separator
        self._time: deque[float] = deque(maxlen=window_size)
        self._batches: deque[int] = deque(maxlen=window_size)
        self._samples: deque[int] = deque(maxlen=window_size)
        self._lengths: deque[int] = deque(maxlen=window_size)
        self._flops: deque[float] = deque(maxlen=window_size)

    def update(
        self, *, time: float, batches: int, samples: int, lengths: int | None = None, flops: float | None = None
    ) -> None:
        """Record running totals after a batch: seconds since the start, batches, samples (and items) so far.

        Args:
            time: Seconds elapsed since the start (growing with each call).
            batches: Batches processed so far, by this process.
            samples: Samples processed so far (at least ``batches``).
            lengths: Items processed so far (tokens...; at least ``samples``).
            flops: FLOPs of this process since the previous update.

        Raises:
            ValueError: Totals that contradict each other.
        """
        if samples < batches:
            raise ValueError(f"Throughput.update: samples ({samples}) must be at least batches ({batches}).")
        self._time.append(time)
        self._batches.append(batches)
        self._samples.append(samples)
        if lengths is not None:
            if lengths < samples:
                raise ValueError(f"Throughput.update: lengths ({lengths}) must be at least samples ({samples}).")
            self._lengths.append(lengths)
            if len(self._lengths) != len(self._samples):
                raise ValueError("Throughput.update: give lengths with every update, or with none.")
        if flops is not None:
            self._flops.append(flops * self.world_size)

    def compute(self) -> dict[str, int | float]:
        """The metrics described in the class docstring, from the updates so far."""
        if not self._time:
            return {}
        sep = self.separator
        metrics: dict[str, int | float] = {
            "time": self._time[-1],
            "batches": self._batches[-1],
            "samples": self._samples[-1],
        }
        if self._lengths:
            metrics["lengths"] = self._lengths[-1]
        several = self.world_size > 1
        full = len(self._time) == self._time.maxlen
        elapsed = self._time[-1] - self._time[0]
        if full and elapsed > 0:
            batches_per_sec = (self._batches[-1] - self._batches[0]) / elapsed
            samples_per_sec = (self._samples[-1] - self._samples[0]) / elapsed
            metrics[f"device{sep}batches_per_sec"] = batches_per_sec
            metrics[f"device{sep}samples_per_sec"] = samples_per_sec
            if several:
                metrics["batches_per_sec"] = batches_per_sec * self.world_size
                metrics["samples_per_sec"] = samples_per_sec * self.world_size
            if len(self._lengths) == self._lengths.maxlen:
                items_per_sec = (self._lengths[-1] - self._lengths[0]) / elapsed
                metrics[f"device{sep}items_per_sec"] = items_per_sec
                if several:
                    metrics["items_per_sec"] = items_per_sec * self.world_size
        if len(self._flops) == self._flops.maxlen and elapsed > 0:
            flops_per_sec = (sum(self._flops) - self._flops[0]) / elapsed  # the flops of the window's intervals
            device_flops = flops_per_sec / self.world_size
            if several:
                metrics["flops_per_sec"] = flops_per_sec
            metrics[f"device{sep}flops_per_sec"] = device_flops
            if self.available_flops:
                metrics[f"device{sep}mfu"] = device_flops / self.available_flops
        return metrics

    def reset(self) -> None:
        """Forget every update."""
        for window in (self._time, self._batches, self._samples, self._lengths, self._flops):
            window.clear()


def measure_flops(
    model: torch.nn.Module,
    forward_fn: Callable[[], torch.Tensor],
    loss_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> int:
    """The FLOPs of ``forward_fn()`` (and of the backward of ``loss_fn(output)``, when given).

    Build the model on the ``meta`` device to count without computing::

        with torch.device("meta"):
            model = MyModel()
            x = torch.randn(8, 32)
        flops = measure_flops(model, lambda: model(x), torch.Tensor.sum)
    """
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        if loss_fn is None:
            with torch.no_grad():
                forward_fn()
        else:
            loss_fn(forward_fn()).backward()
    return int(counter.get_total_flops())
