"""WeightAveraging and EMAWeightAveraging: an average updated every step, validated on, saved in checkpoints."""

from __future__ import annotations

import torch

from torchplug.callbacks import EMAWeightAveraging, LambdaCallback, WeightAveraging


def weights_after_each_step() -> tuple[list[dict[str, torch.Tensor]], LambdaCallback]:
    seen: list[dict[str, torch.Tensor]] = []

    def record(trainer, module, outputs, batch, batch_idx):
        seen.append({k: v.detach().clone() for k, v in module.state_dict().items()})

    return seen, LambdaCallback(on_train_batch_end=record)


def test_ema_of_every_steps_weights(make_trainer, tiny_model, data):
    seen, record = weights_after_each_step()
    model = tiny_model()
    make_trainer(max_epochs=2, callbacks=[record, EMAWeightAveraging(decay=0.9)]).fit(model, data())

    for key, value in model.state_dict().items():
        average = seen[0][key]  # the first update copies the weights
        for weights in seen[1:]:
            average = 0.9 * average + 0.1 * weights[key]
        torch.testing.assert_close(value, average)


def test_updates_start_late_and_skip_steps(make_trainer, tiny_model, data):
    seen, record = weights_after_each_step()
    model = tiny_model()
    ema = EMAWeightAveraging(decay=0.5, update_every_n_steps=3, update_starting_at_step=4)
    make_trainer(max_epochs=2, callbacks=[record, ema]).fit(model, data())

    updates = [seen[step] for step in range(16) if step >= 4 and step % 3 == 0]  # steps 6, 9, 12, 15 (0-based)
    for key, value in model.state_dict().items():
        average = updates[0][key]
        for weights in updates[1:]:
            average = 0.5 * average + 0.5 * weights[key]
        torch.testing.assert_close(value, average)


def test_weight_averaging_defaults_to_the_plain_mean(make_trainer, tiny_model, data):
    seen, record = weights_after_each_step()
    model = tiny_model()
    make_trainer(max_epochs=1, callbacks=[record, WeightAveraging()]).fit(model, data())

    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, torch.stack([w[key] for w in seen]).mean(0))


def test_validation_runs_on_the_averaged_weights(make_trainer, tiny_model, data):
    ema = EMAWeightAveraging(decay=0.9)
    average: list[dict[str, torch.Tensor]] = []
    matches: list[bool] = []

    def keep_average(trainer, module, outputs, batch, batch_idx):
        average[:] = [{k: v.clone() for k, v in ema.average_model.module.state_dict().items()}]

    def compare(trainer, module):
        matches.append(all(torch.equal(v, average[0][k]) for k, v in module.state_dict().items()))

    callbacks = [ema, LambdaCallback(on_train_batch_end=keep_average, on_validation_epoch_start=compare)]
    model = tiny_model()
    make_trainer(max_epochs=2, callbacks=callbacks).fit(model, data(), data())

    assert matches == [True, True]


def test_checkpoints_hold_the_average_and_a_resume_continues_exactly(tmp_path, make_trainer, tiny_model, data):
    uninterrupted = tiny_model()
    make_trainer(max_epochs=2, callbacks=[EMAWeightAveraging(decay=0.8)]).fit(uninterrupted, data())

    path = str(tmp_path / "mid.ckpt")

    def save(trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == 5:
            trainer.save_checkpoint(path)

    ema = EMAWeightAveraging(decay=0.8)
    make_trainer(max_epochs=1, callbacks=[ema, LambdaCallback(on_train_batch_end=save)]).fit(tiny_model(), data())
    checkpoint = torch.load(path, weights_only=True)
    assert set(checkpoint["current_model_state"]) == set(checkpoint["state_dict"])
    assert not torch.equal(checkpoint["current_model_state"]["layer.weight"], checkpoint["state_dict"]["layer.weight"])
    assert checkpoint["callbacks"]["EMAWeightAveraging"]["latest_update_step"] == 5

    resumed = tiny_model()
    make_trainer(max_epochs=2, callbacks=[EMAWeightAveraging(decay=0.8)]).fit(resumed, data(), ckpt_path=path)
    for key, value in uninterrupted.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[key], value)


def test_load_from_checkpoint_gives_the_averaged_model(tmp_path, make_trainer, tiny_model, data):
    model = tiny_model()
    trainer = make_trainer(max_epochs=1, callbacks=[EMAWeightAveraging(decay=0.9)])
    trainer.fit(model, data())
    trainer.save_checkpoint(tmp_path / "final.ckpt")

    loaded = type(model).load_from_checkpoint(tmp_path / "final.ckpt")
    for key, value in model.state_dict().items():  # after fit, the model holds the average
        torch.testing.assert_close(loaded.state_dict()[key], value)
