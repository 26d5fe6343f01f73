"""Regression test for issue 9: each token must weigh the same in the training loss whichever
batch it lands in. A per-batch mean over length-bucketed batches gave a token of a batch of
3-word headlines ten times the weight of one in a batch of 30-word sentences, so the entity
types that live in short lines dominated training (about 5 F1 points lost on real NER). Even
with equal weights, batches of one kind of line cost about one more point, so tagging now
trains on plain shuffled batches."""

import pytest
from torch.nn.functional import cross_entropy

from hubcli.tasks.base import IGNORE_INDEX
from hubcli.tasks.tagging import Tagging
from hubcli.local.train import TrainSettings, train

LABELS = ["O", "B-LOC", "B-PER", "I-LOC", "I-PER"]  # label_names() of the set below
FILLER = "said on Monday that the talks would go on for another week at least".split()


def write_set(path, n: int) -> None:
    """Short headline lines carry LOC only, long sentences carry PER only."""
    blocks = []
    for i in range(n):
        if i % 2:
            rows = [("Oslo", "B-LOC"), ("wins", "O"), (str(i), "O")]
        else:
            rows = [("Anna", "B-PER"), ("Berg", "I-PER"), *((w, "O") for w in FILLER * 2)]
        blocks.append("\n".join(f"{w} {t}" for w, t in rows))
    path.write_text("\n\n".join(blocks) + "\n")


@pytest.mark.parametrize("bucketed", [False, True], ids=["tagging's batches", "bucketed"])
def test_every_token_weighs_the_same_in_any_batch(bucketed, tiny_base_dir, tmp_path, monkeypatch):
    write_set(tmp_path / "train.conll", 64)
    weights: list[tuple[set[str], float]] = []  # (entity types in the batch, weight per token)
    loss = Tagging.loss

    def spy(task, logits, batch):
        value = loss(task, logits, batch)
        labels = batch["labels"].reshape(-1)
        summed = cross_entropy(logits.detach().reshape(-1, logits.size(-1)), labels,
                               ignore_index=IGNORE_INDEX, reduction="sum")
        kinds = {LABELS[i][2:] for i in labels.tolist() if i not in (IGNORE_INDEX, 0)}
        weights.append((kinds, value.item() / summed.item()))
        return value

    monkeypatch.setattr(Tagging, "loss", spy)
    if bucketed:  # the other tasks' batches, as tagging had them when the bug was found
        monkeypatch.setattr(Tagging, "bucket_by_length", True)
    train(TrainSettings(train=tmp_path / "train.conll", out=tmp_path / "out", task="tagging",
                        base=str(tiny_base_dir), epochs=1, batch_size=8, max_length=64,
                        bottleneck=4, precision="fp32", quiet=True), log=lambda _: None)
    kinds = {frozenset(kinds) for kinds, _ in weights}
    if bucketed:  # the short LOC lines and the long PER sentences land in separate batches
        assert kinds == {frozenset({"LOC"}), frozenset({"PER"})}
    else:         # plain shuffled batches mix them
        assert frozenset({"LOC", "PER"}) in kinds
    # either way a token weighs 1 / (labelled tokens of an average batch) in every batch
    labelled = (3 * 32 + (2 + 2 * len(FILLER)) * 32) / 64 * 8
    assert [weight for _, weight in weights] == pytest.approx([1 / labelled] * len(weights))
