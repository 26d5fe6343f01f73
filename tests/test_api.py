"""The Python API: several adapters on one base, switching between them."""

from __future__ import annotations

import pytest
import torch

from factories import close

from hubcli.api import AdapterHub
from hubcli.data import ner_sample, sample_dataset
from hubcli.errors import AdapterError, UsageError
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


@pytest.fixture(scope="module")
def three_adapters(tiny_base_dir, tmp_path_factory):
    """A Houlsby classifier, a Houlsby tagger and a LoRA classifier on the tiny base."""
    out = tmp_path_factory.mktemp("routed")
    train_tsv, _ = sample_dataset()
    ner_train, _ = ner_sample()
    common = dict(base=str(tiny_base_dir), epochs=1, bottleneck=4, max_length=32, quiet=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HUB_HOME", str(out / "home"))
        train(TrainSettings(train=train_tsv, out=out / "sst", **common), log=lambda _m: None)
        train(TrainSettings(train=ner_train, out=out / "ner", task="tagging", **common),
              log=lambda _m: None)
        train(TrainSettings(train=train_tsv, out=out / "lora", method="lora", rank=4, **common),
              log=lambda _m: None)
    return out


def test_predict_routes_each_text_through_its_own_adapter(three_adapters, tiny_base_dir):
    hub = AdapterHub(str(tiny_base_dir))
    for name in ("sst", "ner", "lora"):
        hub.load(three_adapters / name, allow_unsigned=True)
    texts = ["a gripping film", "Angela Merkel visited Paris .", "dull and long",
             "Paris in the spring", "an utter mess", "quietly moving"]
    names = ["sst", "ner", "lora", "ner", "sst", "lora"]
    mixed = hub.predict(texts, adapter=names)
    alone = [hub.predict([t], adapter=n)[0] for t, n in zip(texts, names)]
    assert "entities" in mixed[1] and "label" in mixed[0]
    assert all(close(m, a) for m, a in zip(mixed, alone)), (mixed, alone)
    with pytest.raises(AdapterError, match="2 adapters for 6 texts"):
        hub.predict(texts, adapter=["sst", "ner"])


def test_a_text_cut_short_is_warned_of_by_name_and_routed_alike(three_adapters, tiny_base_dir):
    """Every route warned nothing (the README promises a warning naming the input), and
    routed, a text is called by its number in the caller's list, not in its adapter's share
    of it; a server's hub warns of no client's text."""
    from hubcli.core.composition import Parallel
    from hubcli.tasks.base import LONG_TEXT_CHARS

    long = "word " * (LONG_TEXT_CHARS // 5 + 1)
    for warn_inputs in (True, False):
        seen: list[str] = []
        hub = AdapterHub(str(tiny_base_dir), notify=seen.append, warn_inputs=warn_inputs)
        for name in ("sst", "lora"):
            hub.load(three_adapters / name, allow_unsigned=True)
        seen.clear()
        hub.predict(["fine", long], adapter="sst")
        hub.predict(["fine", long, "dull"], adapter=["sst", "lora", "sst"])
        hub.predict([long], compose=Parallel("sst", "lora"))
        warning = (f"warning: input {{}}: a text of {len(long):,} characters; only its first "
                   "32 tokens are used (--max-length)")
        assert seen == ([warning.format(2)] * 2 + [warning.format(1)] if warn_inputs
                        else []), seen  # a Parallel's adapters read the same texts: once
    with pytest.raises(UsageError, match="input 3 has a second text .* and sst was trained on "
                                         "single texts"):
        hub.predict(["fine", "dull", "a\tb"], adapter=["lora", "sst", "sst"])


def test_predict_with_parallel_equals_each_adapter_separately(three_adapters, tiny_base_dir):
    from hubcli.core.composition import Parallel

    hub = AdapterHub(str(tiny_base_dir))
    for name in ("sst", "ner", "lora"):
        hub.load(three_adapters / name, allow_unsigned=True)
    texts = ["Angela loved Paris", "a dull film"]
    together = hub.predict(texts, compose=Parallel("sst", "ner", "lora"))
    # with the base in it, the rows are routed as one mixed batch instead (no shared trunk)
    routed = hub.predict(texts, compose=Parallel("sst", "__base__"))
    for name in ("sst", "ner", "lora"):
        separate = hub.predict(texts, adapter=name)
        assert all(close(row[name], s) for row, s in zip(together, separate)), name
    assert all(close(row["sst"], s) for row, s in zip(routed, hub.predict(texts, adapter="sst")))
    assert all(len(row["__base__"]["embedding"]) == 32 for row in routed)
    twice = hub.predict(texts, compose=Parallel("sst", "sst"))
    assert all(close(row["sst"], s) for row, s in zip(twice, hub.predict(texts, adapter="sst")))
    with pytest.raises(AdapterError, match="adapter= and compose= both given"):
        hub.predict(texts, adapter="ner", compose=Parallel("sst", "lora"))


def test_loading_a_folder_that_is_not_there_says_so(tiny_base_dir, tmp_path):
    hub = AdapterHub(str(tiny_base_dir))
    with pytest.raises(AdapterError, match="nope: no such adapter folder") as missing:
        hub.load(tmp_path / "nope")
    assert "hub train --out" in missing.value.hint
    with pytest.raises(AdapterError, match="manifest.json: no manifest.json here"):
        hub.load(tmp_path)  # a folder, but no adapter's
    (tmp_path / "a-file").write_text("not a folder")
    with pytest.raises(AdapterError, match="a-file: not a folder"):
        hub.load(tmp_path / "a-file")


def test_parallel_over_adapters_that_tokenize_differently_routes_their_rows(three_adapters,
                                                                            tiny_base_dir):
    """No shared layers when the adapters read other tokens (here one truncates): each
    adapter still gets its own tokens, as in a mixed routed batch."""
    from hubcli.local.inference import run_parallel, run_routed

    hub = AdapterHub(str(tiny_base_dir))
    for name in ("sst", "lora"):
        hub.load(three_adapters / name, allow_unsigned=True)
    texts = ["a gripping, beautifully acted film", "dull"]
    groups = [hub._group("sst", texts, range(2)), hub._group("lora", texts, range(2, 4))]
    groups[1].max_length = 4
    routed = run_routed(hub.model, hub.base.tokenizer, groups)
    assert run_parallel(hub.model, hub.base.tokenizer, groups) == routed
    groups[1].max_length = groups[0].max_length  # the same tokens: the shared path
    shared = run_parallel(hub.model, hub.base.tokenizer, groups)
    assert not close(shared[2], routed[2])  # the truncated first text scored otherwise


def test_base_rows_get_the_base_sentence_embedding_beside_adapter_rows(three_adapters,
                                                                       tiny_base_dir):
    import torch

    hub = AdapterHub(str(tiny_base_dir))
    hub.load(three_adapters / "sst", allow_unsigned=True)
    texts = ["a gripping film", "Angela Merkel visited Paris .", "dull"]
    mixed = hub.predict(texts, adapter=["__base__", "sst", "__base__"])
    assert close(mixed[1], hub.predict([texts[1]], adapter="sst")[0])
    hub.deactivate()
    for i in (0, 2):
        batch = dict(hub.base.tokenizer([texts[i]], return_tensors="pt"))
        with torch.no_grad():
            mean = hub.model.encode(**batch)[0].mean(0)
        expected = torch.nn.functional.normalize(mean, dim=0).tolist()
        assert len(mixed[i]["embedding"]) == len(expected) == 32
        assert all(abs(a - b) <= 1e-5 for a, b in zip(mixed[i]["embedding"], expected))


def test_predicts_wrong_shapes_of_input_are_refused_and_base_is_reserved(tiny_base_dir, tmp_path):
    """One string is not a list of texts (it was predicted character by character); a tuple
    of adapters is a list; compose= takes a block; `__base__` names the base, by itself too,
    and no adapter may take it."""
    from hubcli.core.composition import Parallel
    from hubcli.format.vocab import BASE

    train_tsv, _ = sample_dataset()
    train(TrainSettings(train=train_tsv, out=tmp_path / "sst", base=str(tiny_base_dir),
                        epochs=1, bottleneck=4, max_length=32, quiet=True), log=lambda _m: None)
    hub = AdapterHub(str(tiny_base_dir))
    hub.load(tmp_path / "sst")
    with pytest.raises(TypeError, match="texts is one string"):
        hub.predict("the soup was cold")
    assert len(hub.predict(t for t in ["fine", "dull"])) == 2  # a generator is read once
    with pytest.raises(TypeError, match="text 2 is a NoneType, not a string"):
        hub.predict(["fine", None])
    with pytest.raises(UsageError, match="text 2 is blank"):  # predicted as if it said something
        hub.predict(["fine", " "], adapter=["sst", BASE])
    assert hub.predict(["a", "b"], adapter=("sst", BASE)) == hub.predict(["a", "b"],
                                                                         adapter=["sst", BASE])
    with pytest.raises(AdapterError, match="compose= takes a Parallel, Stack or Fuse"):
        hub.predict(["a"], compose=["sst", BASE])
    assert hub.predict(["a"], adapter=BASE) == hub.predict(["a"], adapter=[BASE])
    with pytest.raises(AdapterError, match="no adapter named ''"):  # not the active one
        hub.predict(["a"], adapter="")
    with pytest.raises(AdapterError, match="__base__ is reserved"):
        hub.load(tmp_path / "sst", name=BASE)
    assert hub.predict(["a"], compose=Parallel("sst", BASE))[0][BASE] == hub.predict(
        ["a"], adapter=BASE)[0]
