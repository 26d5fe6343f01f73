"""The Python API: several adapters on one base, switching between them."""

from __future__ import annotations

import pytest
import torch

from hubcli.api import AdapterHub
from hubcli.data import ner_sample, sample_dataset
from hubcli.errors import AdapterError
from hubcli.local.train import TrainSettings, train


def test_many_adapters_share_one_base(tiny_base_dir, tmp_path):
    train_tsv, _ = sample_dataset()
    ner_train, _ = ner_sample()
    common = dict(base=str(tiny_base_dir), epochs=1, bottleneck=4, max_length=32, quiet=True)
    train(TrainSettings(train=train_tsv, out=tmp_path / "sst", **common), log=lambda _m: None)
    train(TrainSettings(train=ner_train, out=tmp_path / "ner", task="tagging", **common),
          log=lambda _m: None)

    hub = AdapterHub(str(tiny_base_dir))
    enc = dict(hub.base.tokenizer(["a film"], return_tensors="pt"))
    with torch.no_grad():
        bare = hub.model.encode(**enc)
    assert hub.load(tmp_path / "sst") == "sst"
    assert hub.load(tmp_path / "ner", name="entities") == "entities"
    assert hub.adapters == ["sst", "entities"]
    assert hub.predict(["a gripping film"], adapter="sst")[0]["label"] in ("negative", "positive")
    assert "entities" in hub.predict(["Angela Merkel visited Paris ."], adapter="entities")[0]
    hub.deactivate()
    with torch.no_grad():
        assert torch.equal(hub.model.encode(**enc), bare)
    hub.remove("sst")
    with pytest.raises(AdapterError, match="no adapter named 'sst'"):
        hub.activate("sst")
