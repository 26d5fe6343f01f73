"""The task table and the packaged sample data sets."""

import sys

import pytest

from hubcli.data import ner_sample, sample_dataset
from hubcli.errors import UsageError
from hubcli.tasks import TASKS, get_task


def test_task_table():
    assert {name: cls.head_type for name, cls in TASKS.items()} == {
        "classification": "sequence_classification", "regression": "regression",
        "tagging": "token_classification", "qa": "question_answering"}
    assert get_task("tagging").name == "tagging"
    assert get_task("qa") is not get_task("qa")  # fresh instances: encode() keeps the pad id


def test_unknown_task_names_the_choices():
    with pytest.raises(UsageError) as info:
        get_task("ner")
    assert str(info.value) == ("unknown task 'ner'; choose one of: classification, regression, "
                               "tagging, qa")


def test_importing_tasks_does_not_load_torch_or_transformers():
    import subprocess

    code = ("import sys, hubcli.tasks, hubcli.tasks.metrics, hubcli.data; "
            "print('torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_sentiment_sample():
    train_path, dev_path = sample_dataset()
    task = get_task("classification")
    train, dev = task.read(train_path), task.read(dev_path)
    assert (len(train), len(dev)) == (400, 120)
    assert task.label_names(train) == task.label_names(dev) == ["negative", "positive"]
    assert not {e.text for e in train} & {e.text for e in dev}
    positives = sum(e.label == "positive" for e in train) / len(train)
    assert 0.4 < positives < 0.6


def test_ner_sample(tokenizer):
    train_path, dev_path = ner_sample()
    task = get_task("tagging")
    train, dev = task.read(train_path), task.read(dev_path)
    assert (len(train), len(dev)) == (150, 50)
    labels = task.label_names(train)
    assert labels == ["O", "B-LOC", "B-MISC", "B-ORG", "B-PER",
                      "I-LOC", "I-MISC", "I-ORG", "I-PER"]
    task.encode(dev, tokenizer, labels, 64)  # every dev tag is known to a model trained on train
