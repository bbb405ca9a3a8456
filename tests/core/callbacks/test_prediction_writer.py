"""BasePredictionWriter: predictions reach the writer with the dataset indices of their samples."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from torchplug._errors import MisconfigurationError
from torchplug.callbacks import BasePredictionWriter


class Recorder(BasePredictionWriter):
    def __init__(self, write_interval: str) -> None:
        super().__init__(write_interval)
        self.batches: list[tuple[Any, ...]] = []
        self.epoch: tuple[Any, Any] | None = None

    def write_on_batch_end(self, trainer, module, prediction, batch_indices, batch, batch_idx, dataloader_idx):
        self.batches.append(
            (prediction, None if batch_indices is None else list(batch_indices), batch_idx, dataloader_idx)
        )

    def write_on_epoch_end(self, trainer, module, predictions, batch_indices):
        self.epoch = (predictions, batch_indices)


def loader(shuffle: bool = False, n: int = 10) -> DataLoader[Any]:
    x = torch.arange(n, dtype=torch.float32).unsqueeze(1).repeat(1, 4)  # sample i is all i
    return DataLoader(TensorDataset(x, x[:, :1]), batch_size=4, shuffle=shuffle)


def model_that_echoes_its_input(tiny_model):
    model = tiny_model()
    model.predict_step = lambda batch, batch_idx: batch[0][:, 0]  # the prediction names its sample
    return model


def test_batches_come_with_their_indices_even_when_shuffled(make_trainer, tiny_model):
    torch.manual_seed(3)
    writer = Recorder("batch")
    make_trainer(callbacks=[writer]).predict(model_that_echoes_its_input(tiny_model), loader(shuffle=True))

    assert [b[2] for b in writer.batches] == [0, 1, 2]
    assert sorted(i for b in writer.batches for i in b[1]) == list(range(10))
    for prediction, indices, _, dataloader_idx in writer.batches:
        assert prediction.tolist() == [float(i) for i in indices]  # each prediction belongs to its index
        assert dataloader_idx == 0
    assert writer.epoch is None


def test_epoch_writers_get_everything_even_without_return_predictions(make_trainer, tiny_model):
    writer = Recorder("epoch")
    returned = make_trainer(callbacks=[writer]).predict(
        model_that_echoes_its_input(tiny_model), loader(), return_predictions=False
    )

    assert returned is None
    assert writer.batches == []
    predictions, indices = writer.epoch
    assert [p.tolist() for p in predictions] == [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0], [8.0, 9.0]]
    assert indices == [[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]]  # per dataloader, per batch


def test_several_dataloaders(make_trainer, tiny_model):
    writer = Recorder("batch_and_epoch")
    model = model_that_echoes_its_input(tiny_model)
    model.predict_step = lambda batch, batch_idx, dataloader_idx=0: batch[0][:, 0] + 100 * dataloader_idx
    make_trainer(callbacks=[writer]).predict(model, [loader(n=5), loader(n=3)])

    assert [(b[2], b[3]) for b in writer.batches] == [(0, 0), (1, 0), (0, 1)]
    predictions, indices = writer.epoch
    assert len(predictions) == 2 and indices == [[[0, 1, 2, 3], [4]], [[0, 1, 2]]]
    assert predictions[1][0].tolist() == [100.0, 101.0, 102.0]


def test_an_iterable_without_indices_gives_none(make_trainer, tiny_model):
    writer = Recorder("batch")

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter([(torch.ones(4), torch.ones(1))] * 3)

    make_trainer(callbacks=[writer]).predict(
        model_that_echoes_its_input(tiny_model), DataLoader(Stream(), batch_size=2)
    )
    assert [b[1] for b in writer.batches] == [None, None]


def test_a_writer_that_does_not_implement_its_interval_says_so(make_trainer, tiny_model):
    with pytest.raises(NotImplementedError, match=r"write_interval='batch' but does not implement write_on_batch_end"):
        make_trainer(callbacks=[BasePredictionWriter("batch")]).predict(
            model_that_echoes_its_input(tiny_model), loader()
        )


def test_an_unknown_interval_is_refused():
    with pytest.raises(
        MisconfigurationError, match=r"write_interval='step'\): choose one of batch, epoch, batch_and_epoch"
    ):
        BasePredictionWriter("step")
