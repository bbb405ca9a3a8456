"""Every stage of a run in one process group: fit with validation, test and validate from checkpoints, predict.

``fit`` validates each epoch (with the sanity check), a ``ModelCheckpoint`` monitors ``val_loss``
and saves ``last``; then ``test(ckpt_path="best")``, ``validate(ckpt_path="last")`` and
``predict`` run on the same Trainer, as a user's script does. Rank 0 writes ``stages.json``: the
metrics of each stage and the checkpoint paths used.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parents[4]))

import torchplug
from tests.core.strategies.scripts import common
from torchplug.callbacks.model_checkpoint import ModelCheckpoint


class Evaluated(common.Regressor):
    """The Regressor with ``validation_step`` and ``predict_step``."""

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self(x), y), sync_dist=True)

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self(batch[0])  # type: ignore[no-any-return]


def strategy_of(name: str) -> Any:
    if name == "fsdp_sharded":
        from torchplug.strategies.fsdp import FSDPStrategy

        return FSDPStrategy(state_dict_type="sharded")
    return name


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--strategy", default="ddp")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--inference-mode", default="true", choices=("true", "false"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    trainer = torchplug.Trainer(
        accelerator="cpu",
        devices=args.devices,
        strategy=strategy_of(args.strategy),
        max_epochs=2,
        logger=False,
        callbacks=[ModelCheckpoint(dirpath=os.path.join(args.out, "ckpts"), monitor="val_loss", save_last=True)],
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=1,
        log_every_n_steps=1,
        inference_mode=args.inference_mode == "true",
        default_root_dir=args.out,
    )
    model = Evaluated()
    trainer.fit(model, common.loader(32, 8), common.loader(16, 8, shuffle=False))
    best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
    tested = trainer.test(model, common.loader(16, 8, shuffle=False), ckpt_path="best", verbose=False)
    tested_path = trainer.ckpt_path
    validated = trainer.validate(model, common.loader(16, 8, shuffle=False), ckpt_path="last", verbose=False)
    validated_path = trainer.ckpt_path
    predicted = trainer.predict(model, common.loader(16, 8, shuffle=False))
    if trainer.is_global_zero:
        common.write_json(
            Path(args.out) / "stages.json",
            {
                "best": best,
                "tested": tested,
                "tested_path": tested_path,
                "validated": validated,
                "validated_path": validated_path,
                "predicted": len(predicted or []),
            },
        )


if __name__ == "__main__":
    main()
