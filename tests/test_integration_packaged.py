"""On the real packaged base (all-MiniLM-L6-v2): identity, hash, and a short train -> predict."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from hubcli.cli.main import cli
from hubcli.base.load import load_base
from hubcli.base.ref import DEFAULT_BASE_NAME
from hubcli.core.config import HoulsbyConfig
from hubcli.core.model import AdapterModel
from hubcli.data import sample_dataset

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def packaged():
    return load_base()


def test_packaged_base_identity(packaged):
    info = packaged.info
    assert info.name == DEFAULT_BASE_NAME
    assert (info.model_type, info.hidden_size, info.num_layers) == ("bert", 384, 6)
    assert info.num_parameters == 22_713_216
    # the pinned package's weights; a change here means adapters trained before won't attach
    assert info.content_hash == ("sha256:d276aa58d68c4eeef90da3e9185951b96c7781164d582341"
                                 "e5a617070cec121e")


def test_fresh_adapter_barely_moves_the_real_base(packaged):
    enc = packaged.tokenizer(["a gripping, beautifully acted film", "the plot was dull"],
                             padding=True, return_tensors="pt")
    model = AdapterModel(packaged.encoder)
    with torch.no_grad():
        before = model.encode(**enc)
        torch.manual_seed(0)
        model.add_adapter("probe", HoulsbyConfig(), None)
        model.activate("probe")
        diff = (model.encode(**enc) - before).abs()
        model.remove_adapter("probe")
    # 12 adapters at init scale 1e-3 on d=384: mean change ~4e-5, largest ~2e-4
    assert diff.mean().item() < 1e-4
    assert diff.max().item() < 1e-3


def test_train_then_predict_on_the_packaged_base(tmp_path):
    train, dev = sample_dataset()
    out = tmp_path / "sst"
    runner = CliRunner()
    result = runner.invoke(cli, ["train", "--train", str(train), "--validation", str(dev),
                                 "--out", str(out), "--epochs", "1", "--max-length", "48",
                                 "--quiet", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    share = summary["parameters"]["trainable"] / summary["parameters"]["base"]
    assert 0.03 < share < 0.04  # ~3.3% of the base, as in the paper's ~3.6%
    assert summary["history"][0]["accuracy"] > 0.6
    pred = runner.invoke(cli, ["predict", str(out), "--json", "an absolute delight from start to finish"])
    assert pred.exit_code == 0, pred.output
    assert json.loads(pred.stdout)["label"] == "positive"


def test_compact_encoder_matches_transformers_on_the_packaged_base(packaged):
    from transformers import BertModel

    from hubcli.core.bert import CompactBert

    assert isinstance(packaged.encoder, CompactBert)
    reference = BertModel.from_pretrained(packaged.info.path, attn_implementation="sdpa").eval()
    enc = packaged.tokenizer(["a gripping, beautifully acted film", "dull"], ["ok", "the plot"],
                             padding=True, return_tensors="pt")
    real = enc["attention_mask"].bool()
    with torch.no_grad():
        diff = packaged.encoder(**enc).last_hidden_state - reference(**enc).last_hidden_state
    assert diff[real].abs().max().item() <= 1e-6
