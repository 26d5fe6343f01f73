"""Regenerate the fixtures that tests/test_interop_import.py reads: adapters written by the
real `adapters` library (AdapterHub) on a tiny random BERT, with the logits it computes.

It runs in its own venv, since that library pins its own transformers:
    /path/to/venv-with-adapters/bin/python tests/data/adapters_fixtures/make.py

Writes, next to this script:
  base/                    a tiny random BERT (d=32, 2 layers) with a 60-word WordPiece vocab
  houlsby_cls_bin/         double_seq_bn (the library's defaults: swish, reduction 16),
                           classification head, pickled .bin files as save_adapter writes them
  houlsby_tag_st/          double_seq_bn with relu, reduction 8, scaling 2.0, leave_out [1],
                           a tagging head, as safetensors
  lora_cls/                LoRA r=4, alpha=8 on q and v, leave_out [0], classification head
  seq_bn_cls/              seq_bn (Pfeiffer: the library's defaults, relu, reduction 16)
  seq_bn_tag_st/           seq_bn with swish, reduction 8, residual_before_ln false, after both
                           sublayers, leave_out [1], a tagging head
  seq_bn_post_add_cls/     seq_bn with gelu, residual_before_ln "post_add", scaling 2.0
  par_bn_cls/              par_bn (He et al.: the library's defaults, relu, reduction 2,
                           scaling 4.0)
  seq_bn_reg/              seq_bn, a regression head (`add_classification_head` with
                           num_labels=1, as for STS-B)
  houlsby_qa/              double_seq_bn, a question-answering head (`add_qa_head`), run on
                           question/context pairs
  expected.json            per fixture: the library's version, input ids, attention mask, logits
                           (QA: its start_logits and end_logits)
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import adapters
import torch
from adapters import BertAdapterModel, DoubleSeqBnConfig, LoRAConfig, ParBnConfig, SeqBnConfig
from transformers import BertConfig, BertModel, BertTokenizerFast

HERE = Path(__file__).parent
WORDS = ("a fine film dull plot great acting bad good movie the was and not very story "
         "boring loved it hated fun slow london paris alice bob met in visited").split()
TEXTS = ["a fine film", "the plot was very dull and slow", "alice visited paris"]
# QA: (question, context); "who" and "where" are not in the vocab, so [UNK]
PAIRS = [("who visited paris", "alice visited paris"),
         ("where was bob", "bob met alice in london and visited paris"), ("who met bob", "alice")]


def make_base(out: Path) -> BertTokenizerFast:
    out.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    (out / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tok = BertTokenizerFast(vocab_file=str(out / "vocab.txt"), do_lower_case=True)
    tok.save_pretrained(out)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
    BertModel(config).save_pretrained(out)  # safetensors
    return tok


def randomise(model: BertAdapterModel, name: str, seed: int) -> None:
    """Adapter and head weights far from their near-identity init, so a wrong mapping shows."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if f".{name}." in pname or pname.startswith(f"heads.{name}."):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)


def make_fixture(base: Path, tok, name: str, config, head: str, safetensors: bool,
                 seed: int) -> dict:
    model = BertAdapterModel.from_pretrained(base)
    model.add_adapter(name, config=config)
    if head == "classification":
        model.add_classification_head(name, num_labels=2, id2label={0: "negative", 1: "positive"})
    elif head == "regression":
        model.add_classification_head(name, num_labels=1)
    elif head == "qa":
        model.add_qa_head(name)
    else:
        model.add_tagging_head(name, num_labels=3, id2label={0: "O", 1: "B-LOC", 2: "B-PER"})
    model.set_active_adapters(name)
    randomise(model, name, seed)
    model.eval()
    out = Path(name)
    shutil.rmtree(out, ignore_errors=True)
    model.save_adapter(str(out), name, use_safetensors=safetensors)
    texts = PAIRS if head == "qa" else TEXTS
    batch = tok(*zip(*texts) if head == "qa" else (TEXTS,), padding=True, return_tensors="pt")
    with torch.no_grad():
        output = model(**batch)
    logits = ({"start_logits": output.start_logits.tolist(),
               "end_logits": output.end_logits.tolist()} if head == "qa"
              else {"logits": output.logits.tolist()})
    return {"adapters_version": adapters.__version__, "texts": texts,
            "input_ids": batch["input_ids"].tolist(),
            "attention_mask": batch["attention_mask"].tolist(),
            "token_type_ids": batch["token_type_ids"].tolist(), **logits}


def main() -> None:
    os.chdir(HERE)  # configs record model_name as given: "base", not this machine's path
    base = Path("base")
    shutil.rmtree(base, ignore_errors=True)
    tok = make_base(base)
    expected = {
        "houlsby_cls_bin": make_fixture(base, tok, "houlsby_cls_bin", DoubleSeqBnConfig(),
                                        "classification", safetensors=False, seed=1),
        "houlsby_tag_st": make_fixture(
            base, tok, "houlsby_tag_st",
            DoubleSeqBnConfig(non_linearity="relu", reduction_factor=8, scaling=2.0, leave_out=[1]),
            "tagging", safetensors=True, seed=2),
        "lora_cls": make_fixture(base, tok, "lora_cls", LoRAConfig(r=4, alpha=8, leave_out=[0]),
                                 "classification", safetensors=True, seed=4),
        "seq_bn_cls": make_fixture(base, tok, "seq_bn_cls", SeqBnConfig(), "classification",
                                   safetensors=True, seed=3),
        "seq_bn_tag_st": make_fixture(
            base, tok, "seq_bn_tag_st",
            SeqBnConfig(non_linearity="swish", reduction_factor=8, residual_before_ln=False,
                        mh_adapter=True, leave_out=[1]),
            "tagging", safetensors=True, seed=5),
        "seq_bn_post_add_cls": make_fixture(
            base, tok, "seq_bn_post_add_cls",
            SeqBnConfig(non_linearity="gelu", residual_before_ln="post_add", scaling=2.0),
            "classification", safetensors=True, seed=6),
        "par_bn_cls": make_fixture(base, tok, "par_bn_cls", ParBnConfig(), "classification",
                                   safetensors=True, seed=7),
        "seq_bn_reg": make_fixture(base, tok, "seq_bn_reg", SeqBnConfig(), "regression",
                                   safetensors=True, seed=8),
        "houlsby_qa": make_fixture(base, tok, "houlsby_qa", DoubleSeqBnConfig(), "qa",
                                   safetensors=True, seed=9),
    }
    Path("expected.json").write_text(json.dumps(expected, indent=1) + "\n")


if __name__ == "__main__":
    main()
