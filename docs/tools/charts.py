"""Charts of the benchmarks' JSON results (``docs/benchmarks/*.json``), drawn at every site build.

Each result file is what ``docs/tools/record_benchmarks.py`` wrote: the benchmark's own ``--json``
document under ``result``, beside the ``host`` and the ``date`` of the run, which every chart
shows. The PNGs go straight into the built site; none is committed.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(folder: Path, name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((folder / f"{name}.json").read_text())
    return doc


def _caption(doc: dict[str, Any]) -> str:
    host = doc["host"]
    return (
        f"{host['processor']}, {host['cpus']} CPUs, load {host['load_average'][0]}; "
        f"torch {host['torch']}, Python {host['python']}; {doc['date'][:10]}"
    )


def _figure(width: float, height: float) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")  # no display: the charts go to files
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(width, height))


def _png(fig: Any) -> bytes:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def step_overhead(doc: dict[str, Any]) -> bytes:
    """Time per step of each Trainer configuration over the raw loop, beside Lightning's (reference)."""
    result = doc["result"]
    variants = {k: v for k, v in result["variants"].items() if k in ("B", "C", "D")}
    ours = [v["ratio"] for v in variants.values()]
    lightning = [result["lightning_reference"]["ratio"].get(k) for k in variants]
    labels = [f"{k}: {v['description']}" for k, v in variants.items()]
    fig, ax = _figure(8, 3.6)
    y = range(len(labels))
    ax.barh([i + 0.2 for i in y], ours, height=0.4, label="torchplug (this run)", color="#e0653a")
    ax.barh([i - 0.2 for i in y], [x or 0 for x in lightning], height=0.4, label="Lightning 2.6.6 (reference)")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(list(y), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("time per step ÷ raw PyTorch loop (1.0 = no overhead)")
    ax.set_title("Per-step overhead against raw PyTorch", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    fig.text(0, -0.05, _caption(doc), fontsize=7)
    return _png(fig)


def checkpoint_save(doc: dict[str, Any]) -> bytes:
    """Seconds per checkpoint save, synchronous and asynchronous (blocked time), against torch.save."""
    seconds = doc["result"]["seconds"]
    names = [n for n in seconds if "load" not in n]
    values = [seconds[n]["median"] for n in names]
    fig, ax = _figure(8, 0.32 * len(names) + 1.2)
    colours = ["#e0653a" if "blocks" in n else "#4a7ab5" for n in names]
    ax.barh(range(len(names)), values, color=colours)
    ax.set_yticks(range(len(names)), names, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("seconds (median of the rounds); orange: time an asynchronous save blocks the training loop")
    mb = doc["result"].get("megabytes", 0)
    ax.set_title(f"Checkpoint save ({mb:.0f} MB)" if mb else "Checkpoint save", fontsize=10)
    fig.text(0, -0.03, _caption(doc), fontsize=7)
    return _png(fig)


def startup(doc: dict[str, Any]) -> bytes:
    """Median seconds of each start-up command, ``import torch`` alone included."""
    samples = doc["result"]["samples"]
    names = list(samples)
    values = [samples[n]["median_s"] for n in names]
    fig, ax = _figure(8, 0.35 * len(names) + 1.2)
    ax.barh(range(len(names)), values, color="#4a7ab5")
    ax.set_yticks(range(len(names)), names, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("seconds (median of the rounds)")
    ax.set_title("Start-up: import torchplug and build a Trainer, over import torch", fontsize=10)
    fig.text(0, -0.03, _caption(doc), fontsize=7)
    return _png(fig)


CHARTS: dict[str, Callable[[dict[str, Any]], bytes]] = {
    "step_overhead": step_overhead,
    "checkpoint_save": checkpoint_save,
    "startup": startup,
}


def draw_all(folder: Path = BENCHMARKS) -> dict[str, bytes]:
    """Every chart whose result file is in ``folder``, as PNG bytes by benchmark name."""
    return {name: draw(_load(folder, name)) for name, draw in CHARTS.items() if (folder / f"{name}.json").is_file()}


def markdown(folder: Path = BENCHMARKS) -> str:
    """The charts, each with the command, the host and the date of its run."""
    out = []
    for name in CHARTS:
        path = folder / f"{name}.json"
        if not path.is_file():
            raise PluginError(f"{path} is missing: run python docs/tools/record_benchmarks.py {name}")
        doc = _load(folder, name)
        out += [
            f"### `{name}`",
            "",
            f"![{name}](charts/{name}.png)",
            "",
            f"`{doc['command']}` on {doc['date']}: {_caption(doc)} (`docs/benchmarks/{name}.json`).",
            "",
        ]
    return "\n".join(out)
