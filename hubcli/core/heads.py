"""Task heads. Each adapter owns one head; its labels travel with it in the manifest."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from hubcli.format.spec import HEAD_TYPES


@dataclass(frozen=True)
class HeadConfig:
    """What a task head predicts."""

    type: str = field(metadata={"help": "one of " + ", ".join(HEAD_TYPES)})
    num_outputs: int = field(metadata={"help": "classes, 1 for regression, 2 for QA start/end"})
    labels: tuple[str, ...] = field(default=(), metadata={"help": "id2label in id order"})
    pooling: str = field(default="mean", metadata={
        "help": "sequence heads: mean over tokens, or the first ([CLS]) token"})
    dropout: float = 0.1
    label_scheme: str | None = field(default=None, metadata={
        "help": "token heads: the tagging scheme the labels were learnt in (IOB1)"})

    def __post_init__(self) -> None:
        if self.type not in HEAD_TYPES:
            raise ValueError(f"unknown head type {self.type!r}; choose from {', '.join(HEAD_TYPES)}")

    def to_manifest(self) -> dict:
        out = {"type": self.type, "num_outputs": self.num_outputs, "labels": list(self.labels)}
        if self.type in ("sequence_classification", "regression"):
            out["pooling"] = self.pooling
        if self.label_scheme is not None:
            out["label_scheme"] = self.label_scheme
        return out

    @classmethod
    def from_manifest(cls, head: dict) -> HeadConfig:
        return cls(type=head["type"], num_outputs=int(head["num_outputs"]),
                   labels=tuple(head.get("labels", ())), pooling=head.get("pooling", "mean"),
                   label_scheme=head.get("label_scheme"))


class SequenceHead(nn.Module):
    """Pool the sequence, then dense + tanh + output (as BERT's classifier over its pooler)."""

    def __init__(self, d: int, cfg: HeadConfig):
        super().__init__()
        self.pooling = cfg.pooling
        self.dropout = nn.Dropout(cfg.dropout)
        self.dense = nn.Linear(d, d)
        self.out = nn.Linear(d, cfg.num_outputs)

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        if self.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        x = torch.tanh(self.dense(self.dropout(pooled)))
        return self.out(self.dropout(x))


class TokenHead(nn.Module):
    """Per-token output: tagging labels, or QA start/end logits."""

    def __init__(self, d: int, cfg: HeadConfig):
        super().__init__()
        self.dropout = nn.Dropout(cfg.dropout)
        self.out = nn.Linear(d, cfg.num_outputs)

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.out(self.dropout(hidden))


def build_head(d: int, cfg: HeadConfig) -> nn.Module:
    if cfg.type in ("sequence_classification", "regression"):
        return SequenceHead(d, cfg)
    return TokenHead(d, cfg)
