"""Throwaway: the trainer trains a biLM with ``lstm.layer_norm`` and its run folder embeds under the default plan."""

from __future__ import annotations

import torch

from pyelmo.embedding.embedder import ElmoEmbedder
from pyelmo.modeling.characters import batch_to_ids
from pyelmo.modelio.weights import from_pretrained
from pyelmo.training.trainer import train
from tinyconfig import tiny_train_config


def test_trainer_trains_layer_norm_and_the_folder_embeds(tmp_path):
    corpus = tmp_path / "corpus"
    text = "".join(f"the {a} sees the {b} .\n" for a in "cat dog bird fish".split() for b in "cow goat sheep".split())
    for split in ("train", "valid", "test"):
        (corpus / split).mkdir(parents=True)
        (corpus / split / "part.txt").write_text(text * 4, encoding="utf-8")
    train(tiny_train_config(lstm__layer_norm=True), tmp_path / "run", data_dir=corpus)
    model = from_pretrained(tmp_path / "run" / "model")
    norm = model.directions[0][0].cell_norm
    assert not (torch.allclose(norm.weight, torch.ones_like(norm.weight)) and torch.equal(norm.bias, torch.zeros_like(norm.bias)))
    sentences = [["the", "cat", "sees", "."], ["a", "goat"]]
    with torch.no_grad():
        expected = model(batch_to_ids(sentences)).layers
    for row, vectors in enumerate(ElmoEmbedder(str(tmp_path / "run" / "model")).embed_batch(sentences)):
        assert abs(torch.from_numpy(vectors) - expected[:, row, : len(sentences[row])]).max() <= 1e-5
