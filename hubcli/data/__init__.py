"""Small data sets the project wrote itself, for the quickstart, docs and tests.

sentiment_*.tsv: review sentences (movies, products, restaurants), columns `sentence` and
`label` (positive/negative). ner_sample_*.conll: news-style sentences with invented names,
IOB2 tags for PER, LOC, ORG and MISC.
"""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).parent


def sample_dataset() -> tuple[Path, Path]:
    """(train, dev) TSV files of the sentiment sample: 400 and 120 rows."""
    return _HERE / "sentiment_train.tsv", _HERE / "sentiment_dev.tsv"


def ner_sample() -> tuple[Path, Path]:
    """(train, dev) CoNLL files of the entity sample: 150 and 50 sentences."""
    return _HERE / "ner_sample_train.conll", _HERE / "ner_sample_dev.conll"
