"""A compact BERT encoder in plain PyTorch, for the common case: the packaged MiniLM and any
BERT checkpoint with absolute positions, stored as safetensors.

Why not always `transformers.AutoModel`: importing transformers' BERT costs ~3.7 s before the
first prediction, more than everything else `hub predict` does, and its CPU dropout draws a
Bernoulli sample per element. This module imports neither, and keeps transformers' module
and parameter names (`encoder.layer.0.attention.output.dense`, ...), so checkpoints load as
they are and the targets table and wrappers in this package apply unchanged. In eval mode it
computes what `BertModel` computes (tests compare them to 1e-6); anything it does not cover
(`supports` says no) is loaded with `AutoModel` instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from hubcli.core.ops import ACTIVATION_FUNCTIONS, dropout

_SKIPPED_KEYS = ("embeddings.position_ids",)  # a buffer older checkpoints store
WEIGHTS, WEIGHTS_INDEX = "model.safetensors", "model.safetensors.index.json"


class EncoderOutput(NamedTuple):
    last_hidden_state: torch.Tensor


class Packing(NamedTuple):
    """A padded batch's real tokens packed into one [tokens, d] matrix (row by row), so every
    token-wise product (projections, feed-forward, adapters, LayerNorms) skips the padding:
    a batch of short and long sentences costs its real tokens, not rows x the longest. Only
    attention needs the rows back, and gets them (`pad`) for the moment it runs."""

    keep: torch.Tensor  # [tokens] long: positions of the real tokens in the flat [rows * n]
    rows: int
    n: int

    @classmethod
    def of(cls, attention_mask: torch.Tensor) -> Packing:
        rows, n = attention_mask.shape
        return cls(attention_mask.reshape(-1).nonzero().squeeze(1), rows, n)

    def pad(self, t: torch.Tensor) -> torch.Tensor:
        """[tokens, d] -> [rows, n, d], zeros at the padding."""
        flat = t.new_zeros(self.rows * self.n, t.shape[-1]).index_copy_(0, self.keep, t)
        return flat.view(self.rows, self.n, -1)

    def unpad(self, t: torch.Tensor) -> torch.Tensor:
        """[rows, n, d] -> [tokens, d]."""
        return t.reshape(self.rows * self.n, -1).index_select(0, self.keep)

    def repeat(self, k: int) -> Packing:
        """The packing of the batch `k` times over, one copy after another."""
        offsets = torch.arange(k, device=self.keep.device) * (self.rows * self.n)
        return Packing((offsets[:, None] + self.keep).reshape(-1), self.rows * k, self.n)


class Hidden(NamedTuple):
    """Hidden states part-way through the encoder, with the mask and packing the next layers
    need: padded [rows, n, d], or packed [tokens, d]."""

    h: torch.Tensor
    mask: torch.Tensor | None     # (rows, 1, 1, keys) bool, None without padding
    packing: Packing | None

    def padded(self) -> torch.Tensor:
        """[rows, n, d], zeros at the padding."""
        return self.h if self.packing is None else self.packing.pad(self.h)

    def repeat(self, k: int) -> Hidden:
        """The batch `k` times over, one copy after another (rows, or packed tokens)."""
        ones = (1,) * (self.h.dim() - 1)
        return Hidden(self.h.repeat(k, *ones),
                      None if self.mask is None else self.mask.repeat(k, 1, 1, 1),
                      None if self.packing is None else self.packing.repeat(k))


def supports(config: dict, model_dir: Path) -> bool:
    """True when this module reproduces the model in `model_dir` exactly."""
    return (config.get("model_type") == "bert"
            and config.get("position_embedding_type", "absolute") == "absolute"
            and config.get("hidden_act", "gelu") in ACTIVATION_FUNCTIONS
            and not config.get("is_decoder") and not config.get("add_cross_attention")
            and ((model_dir / WEIGHTS).is_file() or (model_dir / WEIGHTS_INDEX).is_file()))


class BertEmbeddings(nn.Module):
    def __init__(self, c: SimpleNamespace):
        super().__init__()
        self.word_embeddings = nn.Embedding(c.vocab_size, c.hidden_size)
        self.position_embeddings = nn.Embedding(c.max_position_embeddings, c.hidden_size)
        self.token_type_embeddings = nn.Embedding(c.type_vocab_size, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.p = c.hidden_dropout_prob

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor,
                packing: Packing | None = None) -> torch.Tensor:
        """[rows, n, d], or with `packing` [tokens, d] (only the real tokens looked up)."""
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        if packing is None:
            positions = positions[None, :]
        else:
            input_ids, token_type_ids = (t.reshape(-1)[packing.keep]
                                         for t in (input_ids, token_type_ids))
            positions = packing.keep % packing.n
        x = (self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
             + self.position_embeddings(positions))
        return dropout(self.LayerNorm(x), self.p, self.training)


class BertSelfAttention(nn.Module):
    def __init__(self, c: SimpleNamespace):
        super().__init__()
        d = c.hidden_size
        self.query, self.key, self.value = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.heads = c.num_attention_heads
        self.p = c.attention_probs_dropout_prob

    def forward(self, h: torch.Tensor, mask: torch.Tensor | None,
                packing: Packing | None = None) -> torch.Tensor:
        q, k, v = (lin(h) for lin in (self.query, self.key, self.value))
        if packing is not None:  # the three padded at once: a third of the launches
            q, k, v = packing.pad(torch.cat((q, k, v), -1)).chunk(3, -1)
        b, n, d = q.shape
        q, k, v = (t.view(b, n, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        if self.training and self.p > 0:
            # by hand: SDPA's own dropout takes the slow per-element Bernoulli path on the CPU
            scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
            if mask is not None:
                scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
            ctx = dropout(scores.softmax(-1), self.p, True) @ v
        else:
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        ctx = ctx.transpose(1, 2).reshape(b, n, d)
        return ctx if packing is None else packing.unpad(ctx)


class BertSublayerOutput(nn.Module):
    """Output projection, dropout, residual add, LayerNorm: where the adapters go."""

    def __init__(self, d_in: int, c: SimpleNamespace):
        super().__init__()
        self.dense = nn.Linear(d_in, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.p = c.hidden_dropout_prob

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(dropout(self.dense(x), self.p, self.training) + residual)


class BertAttention(nn.Module):
    def __init__(self, c: SimpleNamespace):
        super().__init__()
        self.self = BertSelfAttention(c)
        self.output = BertSublayerOutput(c.hidden_size, c)

    def forward(self, h: torch.Tensor, mask: torch.Tensor | None,
                packing: Packing | None = None) -> torch.Tensor:
        return self.output(self.self(h, mask, packing), h)


class BertIntermediate(nn.Module):
    def __init__(self, c: SimpleNamespace):
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.intermediate_size)
        self.act = ACTIVATION_FUNCTIONS[c.hidden_act]

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.act(self.dense(h))


class BertLayer(nn.Module):
    def __init__(self, c: SimpleNamespace):
        super().__init__()
        self.attention = BertAttention(c)
        self.intermediate = BertIntermediate(c)
        self.output = BertSublayerOutput(c.intermediate_size, c)

    def forward(self, h: torch.Tensor, mask: torch.Tensor | None,
                packing: Packing | None = None) -> torch.Tensor:
        a = self.attention(h, mask, packing)
        return self.output(self.intermediate(a), a)


class BertEncoder(nn.Module):
    def __init__(self, c: SimpleNamespace):
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(c) for _ in range(c.num_hidden_layers))


class BertPooler(nn.Module):
    """Kept so checkpoints round-trip and parameter counts match `BertModel`; our heads pool
    the hidden states themselves."""

    def __init__(self, c: SimpleNamespace):
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.hidden_size)


class CompactBert(nn.Module):
    """`BertModel`'s encoder path (no pooler output, no caches) with the same module names."""

    def __init__(self, config: dict):
        super().__init__()
        defaults = {"type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu",
                    "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1}
        self.raw_config = config
        self.config = SimpleNamespace(**{**defaults, **config})
        self.embeddings = BertEmbeddings(self.config)
        self.encoder = BertEncoder(self.config)
        self.pooler = BertPooler(self.config)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> EncoderOutput:
        """Last hidden states [rows, n, d]; zeros at padded positions (which no head reads)."""
        return EncoderOutput(self.run(self.embed(input_ids, attention_mask, token_type_ids))
                             .padded())

    def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
              token_type_ids: torch.Tensor | None = None) -> Hidden:
        """The embeddings' output, ready for `run`."""
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        mask = packing = None
        if attention_mask is not None and not bool(attention_mask.all()):
            mask = attention_mask.bool()[:, None, None, :]  # (batch, 1, 1, keys)
            packing = Packing.of(attention_mask)
        return Hidden(self.embeddings(input_ids, token_type_ids, packing), mask, packing)

    def run(self, x: Hidden, start: int = 0, stop: int | None = None) -> Hidden:
        """Layers `start` to `stop` (default: the last) on `x`: a forward pass in parts, so
        that several continuations can share the layers below them
        (`AdapterModel.forward_parallel`)."""
        h = x.h
        for layer in self.encoder.layer[start:stop]:
            h = layer(h, x.mask, x.packing)
        return x._replace(h=h)

    @classmethod
    def from_pretrained(cls, model_dir: Path, config: dict) -> "CompactBert":
        """Build the modules and adopt the checkpoint's tensors, as float32.

        Raises:
            KeyError: the checkpoint lacks a tensor the encoder needs (named in the message).
        """
        # built on the CPU, not the meta device: initialising meta tensors imports torch._dynamo
        # (1.3 s), ten times what the throwaway random init costs
        model = cls(config)
        tensors = _read_checkpoint(model_dir)
        expected = model.state_dict()
        missing = [k for k in expected if k not in tensors and not k.startswith("pooler.")]
        if missing:
            raise KeyError(f"{model_dir} has no tensor {missing[0]!r} ({len(missing)} missing)")
        state = {k: tensors[k].float() if k in tensors else torch.zeros_like(v)
                 for k, v in expected.items()}
        model.load_state_dict(state, assign=True)
        return model.eval()

    def save_pretrained(self, out: Path) -> None:
        """Write config.json and model.safetensors, a folder `AutoModel` also reads."""
        from safetensors.torch import save_file

        out = Path(out)
        (out / "config.json").write_text(json.dumps(self.raw_config, indent=2) + "\n")
        save_file({k: v.detach().contiguous() for k, v in self.state_dict().items()},
                  str(out / WEIGHTS), metadata={"format": "pt"})


def _read_checkpoint(model_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    if (model_dir / WEIGHTS).is_file():
        files = [model_dir / WEIGHTS]
    else:
        index = json.loads((model_dir / WEIGHTS_INDEX).read_text())
        files = [model_dir / f for f in sorted(set(index["weight_map"].values()))]
    tensors: dict[str, torch.Tensor] = {}
    for f in files:
        tensors.update(load_file(str(f)))
    # checkpoints saved from a task model (BertForMaskedLM, ...) prefix the encoder with "bert."
    if any(k.startswith("bert.") for k in tensors):
        tensors = {k[5:]: v for k, v in tensors.items() if k.startswith("bert.")}
    return {k: v for k, v in tensors.items() if k not in _SKIPPED_KEYS}
