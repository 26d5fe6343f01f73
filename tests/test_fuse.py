"""`hub fuse` and `hub train --stack` end to end on a tiny random BERT: composed adapters are
trained over frozen components, written with `requires`, and attached only when every
component is the exact one they were composed with, on the same base."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

from factories import close, make_adapter_dir, requirement
from hubcli.cli.main import cli
from hubcli.data import sample_dataset
from hubcli.errors import BaseMismatchError, ComponentError
from hubcli.format import manifest as manifest_io
from hubcli.fsutil import sha256_file

COMPONENTS = ("sst-a", "sst-b", "sst-c")


def run(*args, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input)


@pytest.fixture(scope="module")
def trained_once(tiny_base_dir, tmp_path_factory):
    """Three adapters, a fusion over them and an adapter stacked on the first, trained under
    one HUB_HOME (which remembers them as self-trained)."""
    home = tmp_path_factory.mktemp("fuse_home")
    runs = tmp_path_factory.mktemp("fuse_runs")
    train, dev = sample_dataset()
    common = ["--train", train, "--validation", dev, "--epochs", 1, "--max-length", 32,
              "--quiet", "--json"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HUB_HOME", str(home))
        for seed, name in enumerate(COMPONENTS):
            r = run("train", "--base", tiny_base_dir, "--out", runs / name, "--bottleneck", 8,
                    "--seed", seed, *common)
            assert r.exit_code == 0, r.output
        before = {n: sha256_file(runs / n / "adapter.safetensors") for n in COMPONENTS}
        r = run("fuse", "--adapters", ",".join(str(runs / n) for n in COMPONENTS),
                "--out", runs / "fusion", "--lr", "1e-3", *common)
        assert r.exit_code == 0, r.output
        fused = json.loads(r.stdout)
        r = run("train", "--stack", runs / "sst-a", "--out", runs / "stacked", "--bottleneck", 8,
                *common)
        assert r.exit_code == 0, r.output
    assert before == {n: sha256_file(runs / n / "adapter.safetensors") for n in COMPONENTS}
    return runs, fused, home


@pytest.fixture()
def runs(trained_once, monkeypatch):
    runs, _, home = trained_once
    monkeypatch.setenv("HUB_HOME", str(home))
    return runs


def test_fuse_writes_fusion_weights_and_pins_each_component(trained_once, runs):
    fused = trained_once[1]
    m = manifest_io.read(runs / "fusion")
    assert m["architecture"] == {"type": "fusion", "placement": ["attention_output", "ffn_output"],
                                 "layers": [0, 1], "layernorm": "delta"}
    assert [r["name"] for r in m["requires"]] == list(COMPONENTS)
    for r in m["requires"]:
        assert r["manifest_sha256"] == sha256_file(runs / r["name"] / "manifest.json")
        assert r["path"] == f"../{r['name']}" and r["version"] == "0.1.0"
    assert m["training"]["learning_rate"] == 1e-3
    tensors = load_file(str(runs / "fusion" / "fusion.safetensors"))
    assert not (runs / "fusion" / "adapter.safetensors").exists()
    assert {k.split(".")[0] for k in tensors} == {"fusion", "layernorm", "head"}
    # 4 sites x (3 d x d + 2 d) + LayerNorm deltas (5 LayerNorms x 2 d) + head (d x d + d + 2 d + 2)
    d = 32
    assert fused["parameters"]["trainable"] == 4 * (3 * d * d + 2 * d) + 10 * d + d * d + d + 2 * d + 2
    assert fused["parameters"]["fusion"] == 4 * (3 * d * d + 2 * d)


def test_a_fusion_predicts_and_evaluates_by_its_folder(runs):
    r = run("predict", runs / "fusion", "a gripping film", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout.splitlines()[-1])["label"] in ("negative", "positive")
    _, dev = sample_dataset()
    r = run("eval", runs / "fusion", "--data", dev, "--json")
    assert r.exit_code == 0, r.output
    assert 0 <= json.loads(r.stdout)["metrics"]["accuracy"] <= 1


def test_fusion_training_leaves_base_and_components_bit_identical(runs, tiny_base_dir,
                                                                 monkeypatch, tmp_path):
    from hubcli.base.load import load_base
    from hubcli.local import train as train_mod

    seen = {}
    original = train_mod._Run.save

    def save(self, *args, **kwargs):  # after the last step: the trained model
        seen["model"] = self.model
        return original(self, *args, **kwargs)

    monkeypatch.setattr(train_mod._Run, "save", save)
    train, dev = sample_dataset()
    train_mod.train(train_mod.TrainSettings(
        train=train, validation=dev, out=tmp_path / "f", compose="fuse", lr=1e-2,
        components=tuple(str(runs / n) for n in COMPONENTS), epochs=1, max_length=32,
        quiet=True), log=lambda _m: None)
    model = seen["model"]
    for n in COMPONENTS:
        saved = load_file(str(runs / n / "adapter.safetensors"))
        own = model.named_adapter_tensors(n)
        assert own.keys() == saved.keys()
        assert all(torch.equal(own[k], saved[k]) for k in saved)
    fresh = dict(load_base(str(tiny_base_dir)).encoder.named_parameters())
    frozen = {k.replace(".base_layer", ""): p for k, p in model.encoder.named_parameters()
              if not any(t in k for t in (".adapters.", ".fusions.", ".deltas."))}
    assert frozen.keys() == fresh.keys()
    assert all(torch.equal(frozen[k], fresh[k]) for k in fresh)
    fusion = manifest_io.read(tmp_path / "f")
    changed = load_file(str(tmp_path / "f" / "fusion.safetensors"))
    assert not torch.equal(changed["fusion.0.ffn_output.value.weight"], torch.eye(32))
    assert fusion["training"]["learning_rate"] == 1e-2


def test_a_component_whose_manifest_changed_is_refused_by_name(runs, tmp_path, monkeypatch):
    """Bundling and signing a component after fusing (the README's order) changes its
    manifest (its model card listed, its signer recorded), not what it computes: the fusion
    refused it; so does recording an ablation in it (`hub ablate --record`), which broke
    every fusion over it for good. Any other change is refused, naming the component and
    the pinned digest."""
    copy = tmp_path / "copy"
    shutil.copytree(runs, copy)
    expected = run("predict", runs / "fusion", "a gripping film", "--json")
    monkeypatch.setenv("HUB_HOME", str(tmp_path / "home"))  # its own key, nothing trained
    _, dev = sample_dataset()
    for args in (("keygen",), ("ablate", "--allow-unsigned", copy / "sst-b", "--data", dev,
                               "--out", tmp_path / "ablation", "--record"),
                 ("bundle", copy / "sst-b"), ("sign", copy / "sst-b"),
                 ("ablate", "--allow-unsigned", copy / "sst-c", "--data", dev,
                  "--out", tmp_path / "ablation", "--record"), ("bundle", copy / "sst-c")):
        r = run(*args)
        assert r.exit_code == 0, r.output
    assert "signer" in manifest_io.read(copy / "sst-b")
    assert all("analysis" in manifest_io.read(copy / n) for n in ("sst-b", "sst-c"))
    r = run("predict", "--allow-unsigned", copy / "fusion", "a gripping film", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == json.loads(expected.stdout)
    m = manifest_io.read(copy / "sst-a")
    manifest_io.write(copy / "sst-a", {**m, "description": "edited after fusing"})
    r = run("predict", "--allow-unsigned", copy / "fusion", "a gripping film")
    assert r.exit_code == 1
    assert "component sst-a@0.1.0:" in r.stderr and "manifest sha256" in r.stderr
    assert manifest_io.read(runs / "fusion")["requires"][0]["manifest_sha256"] in r.stderr


def test_a_missing_component_folder_is_named(runs, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(runs / "fusion", copy / "fusion")
    r = run("predict", copy / "fusion", "a gripping film")
    assert r.exit_code == 1
    # where it was looked for (../sst-a was read as from the working folder)
    assert f"component sst-a@0.1.0: its folder {copy.resolve() / 'sst-a'} is missing" in r.stderr
    assert "`hub train --stack NS/NAME@VERSION`" in r.stderr


def test_components_on_another_base_are_refused_before_anything_loads(tmp_path):
    """Nothing of the base "tiny-bert" exists here: the refusal comes from the manifests."""
    from hubcli.local.attach import verify_adapter

    a = make_adapter_dir(tmp_path / "a", name="a")
    other = {"content_hash": "sha256:" + "ef" * 32}
    b = make_adapter_dir(tmp_path / "b", name="b", base_model=other)
    from factories import FUSION

    fusion = make_adapter_dir(tmp_path / "fusion", architecture=FUSION,
                              requires=[requirement(a), requirement(b)])
    with pytest.raises(BaseMismatchError) as e:
        verify_adapter(fusion, allow_unsigned=True)
    assert e.value.component == "b@1.0.0" and "ef" * 32 in str(e.value)
    with pytest.raises(ComponentError, match="component a@1.0.0: .* manifest sha256"):
        manifest_io.write(a, {**manifest_io.read(a), "description": "another"})
        verify_adapter(fusion, allow_unsigned=True)


def test_stacked_adapter_requires_its_base_adapter_and_runs_on_top_of_it(runs):
    from hubcli.api import AdapterHub
    from hubcli.core.composition import Stack

    m = manifest_io.read(runs / "stacked")
    assert m["architecture"]["type"] == "houlsby"
    assert m["requires"] == [{"name": "sst-a", "version": "0.1.0", "path": "../sst-a",
                              "manifest_sha256": sha256_file(runs / "sst-a" / "manifest.json")}]
    hub = AdapterHub(m["base_model"]["name"])
    assert hub.load(runs / "stacked") == "stacked"
    assert hub.model.compositions["stacked"] == Stack("sst-a", "stacked")
    stacked = hub.predict(["a gripping film", "dull"])
    hub.model.compositions.clear()  # now "stacked" is just the top adapter, sst-a not under it
    alone = hub.predict(["a gripping film", "dull"], adapter="stacked")
    assert stacked != alone


@pytest.mark.parametrize("options, refused", [
    (["--method", "lora"], "--method lora"),
    (["--layers", "1", "--layernorm", "own-layers"], "--layernorm own-layers")])
def test_no_adapter_is_stacked_on_one_with_layernorm_deltas_it_lacks(runs, tmp_path, options,
                                                                     refused):
    """The stack runs with the top adapter's LayerNorms: a LoRA has none, a Houlsby adapter
    with own-layers none below its layers, so the adapter below would run under the base's
    there instead of its own."""
    train, dev = sample_dataset()
    r = run("train", "--stack", runs / "sst-a", *options, "--train", train,
            "--validation", dev, "--epochs", 1, "--out", tmp_path / "x")
    assert r.exit_code == 1
    assert (f"error: {refused}: sst-a trained LayerNorm deltas where this adapter has none, "
            "and a stack runs with its top adapter's") in r.output.splitlines()
    assert not (tmp_path / "x").exists()


def test_fuse_needs_two_adapters_and_no_full_finetune(runs, tmp_path):
    train, _ = sample_dataset()
    r = run("fuse", "--adapters", runs / "sst-a", "--train", train, "--out", tmp_path / "o")
    assert r.exit_code == 1 and "a fusion needs two adapters or more" in r.stderr
    r = run("train", "--stack", runs / "sst-a", "--full-finetune", "--train", train,
            "--out", tmp_path / "o")
    assert r.exit_code == 1 and "error: --full-finetune: trains every weight; a fusion or " \
        "stack keeps its components frozen" in r.stderr  # a flag: no value after it


def test_the_server_serves_fusions_and_stacks_beside_single_adapters(runs, tiny_base_dir):
    """`hub serve` refused composed adapters. Concurrent requests for a fusion, an adapter
    stacked on one of its components, a component served on its own and the base, batched
    together by two workers, each get what that adapter predicts alone; a composed adapter
    counts its components' memory, and they go with the last served adapter needing them."""
    from concurrent.futures import ThreadPoolExecutor

    import httpx
    from test_serve import running

    from hubcli.format.manifest import weights_file
    from hubcli.serving.batcher import BatchSettings
    from hubcli.serving.engine import Engine
    from hubcli.serving.pool import Pool
    from hubcli.serving.service import ServeSettings

    served = [str(runs / n) for n in ("fusion", "stacked", "sst-b")]
    texts = ["a gripping film", "dull", "fine", "an utter mess", "quietly moving"]
    alone = {ref: [{"text": t, **p} for t, p in zip(texts, _fresh(ref).predict(texts))]
             for ref in served}
    alone["__base__"] = None
    engine = Engine(str(tiny_base_dir))
    pool = Pool(engine)
    for ref in served:
        pool.add(ref)
    requests = [(ref, i) for _ in range(3) for ref in alone for i in range(0, 5, 2)]
    with running(pool, ServeSettings(BatchSettings(max_wait_ms=50, workers=2))) as (url, _s):
        with httpx.Client(timeout=60) as client, ThreadPoolExecutor(len(requests)) as ex:
            answers = list(ex.map(lambda r: client.post(f"{url}/v1/predict", json={
                "adapter": r[0], "inputs": texts[r[1]:r[1] + 2]}), requests))
            base = client.post(f"{url}/v1/predict", json={"adapter": "__base__",
                                                          "inputs": texts}).json()
    alone["__base__"] = base["predictions"]
    assert [a.status_code for a in answers] == [200] * len(requests)
    for (ref, i), answer in zip(requests, answers):
        assert close(answer.json()["predictions"], alone[ref][i:i + 2]), ref

    def size(*names: str) -> int:
        files = [runs / n / weights_file(manifest_io.read(runs / n)) for n in names]
        return sum(t.numel() * t.element_size() for f in files for t in load_file(f).values())

    listed = pool.listing()
    assert [listed[ref]["bytes"] for ref in served] == [
        size("fusion", *COMPONENTS), size("stacked", "sst-a"), size("sst-b")]
    # together: sst-a, which the fusion and the stacked adapter share, once
    assert pool.nbytes() == size("fusion", *COMPONENTS, "stacked", "sst-b")
    pool.remove(served[0])  # sst-a stays: the stacked adapter needs it
    assert sorted(engine.hub.model.infos) == ["slot1", "slot2", "sst-a"]
    pool.remove(served[1])
    pool.remove(served[2])
    assert engine.hub.model.infos == {} and engine.hub.model.compositions == {}
    assert engine.hub.manifests == {} and engine.hub.components == {}


def test_composed_adapters_are_not_exported_as_one_library_adapter(runs, tmp_path):
    r = run("export", runs / "stacked", "--format", "adapters", "--out", tmp_path / "x")
    assert r.exit_code == 1
    assert "stacked is a fusion or stack over sst-a 0.1.0" in r.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("labels", [("negative", "positive"), ("a", "b", "c")])
def test_a_fusion_over_no_single_twin_starts_with_a_new_head(runs, tiny_base_dir, labels):
    """Two components predict the fusion's labels (nothing tells which was trained on its
    task), or none does: a fresh head, LayerNorm deltas at the components' mean."""
    from hubcli.base.load import load_base
    from hubcli.core.heads import HeadConfig
    from hubcli.core.model import AdapterModel
    from hubcli.local.fuse import FUSE, build, load_components

    base = load_base(str(tiny_base_dir))
    model = AdapterModel(base.encoder)
    components = load_components((str(runs / "sst-b"), str(runs / "sst-a")), runs / "x",
                                 allow_unsigned=False, notify=lambda _m: None)
    said = []
    head = HeadConfig("sequence_classification", len(labels), labels)
    own, _ = build(model, base.info, components, FUSE, "f", head, None, said.append)
    fresh = model.heads[own].state_dict()
    for n in ("sst-a", "sst-b"):
        assert not any(torch.equal(p, model.heads[n].state_dict()[k]) for k, p in fresh.items())
    for site in model.layernorm_sites.values():
        b, a = site.deltas["sst-b"].weight_delta, site.deltas["sst-a"].weight_delta
        assert torch.equal(site.deltas[own].weight_delta, (a + b) / 2)
    twins = labels == ("negative", "positive")
    assert [m for m in said if "starts" in m] == (
        ["the fusion starts with a new head: sst-b, sst-a all predict the same labels, so "
         "none is taken as the adapter trained on this task"] if twins else [])


def _component(name: str):
    from types import SimpleNamespace

    from hubcli.local.fuse import Component

    return Component(SimpleNamespace(manifest={"name": name}), {})


def test_a_fusion_starts_from_the_one_component_with_its_labels(tiny_base_dir):
    """The twin's head, and its LayerNorms exactly: the base's where it has no deltas (a LoRA
    twin), not the other components' mean; a composed component counts by its owner's head."""
    from hubcli.base.load import load_base
    from hubcli.core.composition import Fuse
    from hubcli.core.config import HoulsbyConfig, LoraConfig
    from hubcli.core.heads import HeadConfig
    from hubcli.core.model import AdapterModel
    from hubcli.local.fuse import same_head

    model = AdapterModel(load_base(str(tiny_base_dir)).encoder)
    sentiment = HeadConfig("sequence_classification", 2, ("negative", "positive"))
    other = HeadConfig("sequence_classification", 3, ("a", "b", "c"))
    model.add_adapter("lo", LoraConfig(rank=2), sentiment)
    model.add_adapter("ho", HoulsbyConfig(bottleneck=4), other)
    with torch.no_grad():
        for site in model.layernorm_sites.values():
            site.deltas["ho"].weight_delta.fill_(0.5)
    block = Fuse("lo", "ho")
    own = model.add_fusion(block, sentiment, train_layernorm=True)
    assert same_head(model, [_component("lo"), _component("ho")], sentiment) == [("lo", "lo")]
    model.start_from(own, "lo")
    for k, p in model.heads[own].state_dict().items():
        assert torch.equal(p, model.heads["lo"].state_dict()[k])
    for site in model.layernorm_sites.values():
        assert not site.deltas[own].weight_delta.any() and not site.deltas[own].bias_delta.any()
    model.name_composition("fz", block)  # a fusion attached as a component, by its name
    assert same_head(model, [_component("ho"), _component("fz")], sentiment) == [("fz", own)]
    assert same_head(model, [_component("lo"), _component("fz")], sentiment) == [
        ("lo", "lo"), ("fz", own)]


def _fresh(folder):
    """A hub over the base `folder`'s adapter was trained on, with it loaded alone."""
    from hubcli.api import AdapterHub

    hub = AdapterHub(manifest_io.read(folder)["base_model"]["name"])
    hub.load(folder)
    return hub


def test_a_loaded_fusion_and_its_components_predict_by_name_alone_and_mixed(runs):
    """After load(fusion): predict() runs the fusion (it asked for a model-internal name),
    its components are usable by name, and a per-text list or a Parallel mixing the fusion,
    a component and __base__ gives what each gives alone (a fusion's rows run apart)."""
    from hubcli.core.composition import Parallel
    from hubcli.format.vocab import BASE

    texts = ["a gripping film", "dull", "fine"]
    hub = _fresh(runs / "fusion")
    assert hub.adapters == [*COMPONENTS, "fusion"]
    fused = hub.predict(texts)
    assert fused == hub.predict(texts, adapter="fusion")
    alone = {"fusion": fused, "sst-a": _fresh(runs / "sst-a").predict(texts),
             BASE: hub.predict(texts, adapter=BASE)}
    assert hub.predict(texts, adapter="sst-a") == alone["sst-a"]
    mixed = hub.predict(texts, adapter=["fusion", "sst-a", BASE])
    for i, n in enumerate(["fusion", "sst-a", BASE]):
        assert close(mixed[i], alone[n][i]), n
    both = hub.predict(texts, compose=Parallel("sst-a", "fusion"))
    for i in range(len(texts)):
        assert close(both[i]["sst-a"], alone["sst-a"][i])
        assert both[i]["fusion"] == alone["fusion"][i]


@pytest.mark.parametrize("order", [("stacked", "sst-a"), ("sst-a", "stacked"),
                                   ("fusion", "sst-b")])
def test_predict_a_runs_composed_adapters_beside_their_components(runs, order):
    """`hub predict -a` with a stacked adapter and the one it is stacked on (either order:
    the component is shared, not attached twice), or a fusion and a component: every text
    through each, as each alone predicts it."""
    texts = ["a gripping film", "dull"]
    args = [a for n in order for a in ("-a", runs / n)]
    r = run("predict", *args, *texts, "--json")
    assert r.exit_code == 0, r.output
    lines = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    for n in order:
        alone = _fresh(runs / n).predict(texts)
        got = [line for line in lines if line.get("adapter") == n]
        assert [g["label"] for g in got] == [a["label"] for a in alone], (n, r.stdout)


def test_a_component_two_composed_adapters_share_is_noticed_once(runs):
    """Each verified adapter's notice ("... is not signed; using it because you made it")
    was printed again for a component at every composed adapter sharing it."""
    r = run("predict", "-a", runs / "fusion", "-a", runs / "stacked", "-a", runs / "sst-a",
            "dull", "--json")
    assert r.exit_code == 0, r.output
    notices = [line for line in r.stderr.splitlines() if "sst-a is not signed" in line]
    assert len(notices) == 1, r.stderr


def test_a_loaded_fusion_by_its_block_with_the_base_and_kept_whole(runs):
    """compose=Fuse(...) of a loaded fusion predicts as the fusion (it looked up the block's
    own name); a Parallel of it and __base__ runs; its components cannot be removed from
    under it, even when loaded on their own too (shared), and go with it unless loaded on
    their own; no fusion loads as __base__."""
    from hubcli.core.composition import Fuse, Parallel
    from hubcli.errors import AdapterError
    from hubcli.format.vocab import BASE

    texts = ["a gripping film", "dull"]
    hub = _fresh(runs / "fusion")
    assert hub.predict(texts, compose=Fuse(*COMPONENTS)) == hub.predict(texts)
    both = hub.predict(texts, compose=Parallel("fusion", BASE))
    assert [row["fusion"] for row in both] == hub.predict(texts)
    assert [row[BASE] for row in both] == hub.predict(texts, adapter=BASE)
    assert hub.load(runs / "sst-a") == "sst-a"  # shared with the fusion
    with pytest.raises(AdapterError, match="sst-a is a component of fusion, loaded too"):
        hub.remove("sst-a")
    with pytest.raises(AdapterError, match="no adapter named 'Fuse") as unknown:
        hub.remove(f"Fuse({', '.join(COMPONENTS)})")  # the model's own name for its fusion
    assert unknown.value.hint == f"loaded: {', '.join(COMPONENTS)}, fusion"  # people's names
    with pytest.raises(AdapterError, match="__base__ is reserved"):
        hub.load(runs / "stacked", name=BASE)
    assert "__base__" not in hub.model.infos and "__base__" not in hub.model.compositions
    hub.remove("fusion")  # its components go with it, but sst-a, loaded on its own too
    assert hub.adapters == ["sst-a"] and list(hub.model.infos) == ["sst-a"]
    assert hub.predict(texts) == _fresh(runs / "sst-a").predict(texts)


def test_a_composed_adapters_name_in_a_block_stands_for_its_block(runs):
    """As in adapter= and Parallel: Stack("stacked") ran the top adapter without sst-a under
    it, and a fusion's name in a block was 'not loaded' with the model's own names as hint;
    spelt out, anywhere in a block, a stacked adapter runs what it is stacked on once."""
    from hubcli.core.composition import Fuse, Stack
    from hubcli.errors import AdapterError
    from hubcli.format.vocab import BASE

    texts = ["a gripping film", "dull"]
    hub = _fresh(runs / "stacked")
    hub.load(runs / "fusion")
    stacked, fused = hub.predict(texts, adapter="stacked"), hub.predict(texts, adapter="fusion")
    for spelt in (Stack("stacked"), Stack("sst-a", "stacked"), Stack(Stack("sst-a", "stacked"))):
        assert hub.predict(texts, compose=spelt) == stacked, spelt
    assert hub.predict(texts, compose=Stack("fusion")) == fused
    assert hub.predict(texts, compose=Stack(Fuse(*COMPONENTS, name="fusion"))) == fused
    on_fusion = hub.predict(texts, compose=Stack("fusion", "stacked"))
    assert on_fusion == hub.predict(texts, compose=Stack(Fuse(*COMPONENTS), "sst-a", "stacked"))
    assert on_fusion != stacked
    under = hub.predict(texts, compose=Stack("sst-b", "stacked"))
    assert under == hub.predict(texts, compose=Stack("sst-b", "sst-a", "stacked")) == \
        hub.predict(texts, compose=Stack("sst-b", Stack("sst-a", "stacked")))
    assert under != hub.predict(texts, compose=Stack("sst-b", "sst-a", "sst-a", "stacked"))
    with pytest.raises(AdapterError, match="no adapter named 'nope'") as unknown:
        hub.predict(texts, compose=Stack("nope", "fusion"))
    assert unknown.value.hint == f"loaded: sst-a, stacked, {', '.join(COMPONENTS[1:])}, fusion"
    with pytest.raises(AdapterError, match="__base__ is the untouched base, not an adapter"):
        hub.predict(texts, compose=Stack("sst-a", BASE))


def test_two_fusions_over_the_same_adapters_load_side_by_side(runs):
    """One fusion per target task over the same adapters (Pfeiffer et al.'s setting): the
    second was refused, 'a fusion Fuse(...) is already loaded'. Each fusion's parameters
    are under its own name; Fuse(...) of the adapters alone is then ambiguous, and says so."""
    from hubcli.core.composition import Fuse
    from hubcli.errors import AdapterError

    second = runs / "fusion2"  # beside it: its components are found at ../NAME
    shutil.copytree(runs / "fusion", second, dirs_exist_ok=True)
    m = manifest_io.read(second)
    manifest_io.write(second, {**m, "name": "fusion2"})
    texts = ["a gripping film", "dull"]
    hub = _fresh(runs / "fusion")
    hub.load(second, allow_unsigned=True)
    assert hub.adapters == [*COMPONENTS, "fusion", "fusion2"]
    assert hub.predict(texts, adapter="fusion2") == hub.predict(texts, adapter="fusion")
    both = hub.predict(texts, adapter=["fusion", "fusion2"])
    # a row in a batch of two is the row alone up to float noise (CI saw 7e-9): not bit for bit
    assert close(both, [hub.predict(texts[:1], adapter="fusion")[0],
                        hub.predict(texts[1:], adapter="fusion2")[0]])
    with pytest.raises(AdapterError, match=r"Fuse\(sst-a, sst-b, sst-c\) is fusion and fusion2"):
        hub.predict(texts, compose=Fuse(*COMPONENTS))
    assert hub.predict(texts, compose=Fuse(*COMPONENTS, name="fusion2")) == hub.predict(
        texts, adapter="fusion2")
    with pytest.raises(AdapterError, match="no adapter named 'no-such'"):
        hub.predict(texts, compose=Fuse(*COMPONENTS, name="no-such"))
    with pytest.raises(AdapterError, match="an adapter named 'sst-b' is already loaded"):
        hub.load(runs / "fusion", name="sst-b")
    assert hub.adapters == [*COMPONENTS, "fusion", "fusion2"]
    r = run("predict", "--allow-unsigned", "-a", runs / "fusion", "-a", second, *texts, "--json")
    assert r.exit_code == 0, r.output


def test_a_fusion_is_found_by_its_spelling_kept_under_what_uses_it_and_exported(runs, tmp_path):
    """The first fusion over some adapters is `Fuse(a, b)` to the model, so blocks spelling
    it find it; it cannot be removed from under an adapter stacked on it; and it exports to
    ONNX (the trace took the inference fold, whose block_diag ONNX lacks)."""
    from hubcli.core.composition import Fuse, Stack
    from hubcli.errors import AdapterError

    train, dev = sample_dataset()
    r = run("train", "--stack", runs / "fusion", "--out", runs / "ontop", "--bottleneck", 8,
            "--train", train, "--validation", dev, "--epochs", 1, "--max-length", 32, "--quiet")
    assert r.exit_code == 0, r.output
    texts = ["a gripping film", "dull"]
    hub = _fresh(runs / "ontop")
    assert hub.predict(texts, compose=Stack(Fuse(*COMPONENTS), "ontop")) == hub.predict(texts)
    with pytest.raises(AdapterError, match="fusion is a component of ontop"):
        hub.remove("fusion")
    with pytest.raises(AdapterError, match="sst-a is a component of fusion") as refused:
        hub.remove("sst-a")
    assert refused.value.hint == "remove ontop first"  # not the fusion: it is refused too
    onnx = tmp_path / "fusion.onnx"
    r = run("export", runs / "fusion", "--format", "onnx", "--out", onnx)
    assert r.exit_code == 0, r.output
    by_onnx = run("predict", "--runtime", "onnx", runs / "fusion", *texts, "--json")
    by_torch = run("predict", runs / "fusion", *texts, "--json")
    assert by_onnx.exit_code == by_torch.exit_code == 0, by_onnx.output
    onnx_rows, torch_rows = ([json.loads(line) for line in r.stdout.splitlines()]
                             for r in (by_onnx, by_torch))
    assert [o["label"] for o in onnx_rows] == [t["label"] for t in torch_rows]
    assert all(abs(o["score"] - t["score"]) < 1e-4 for o, t in zip(onnx_rows, torch_rows))


def test_a_fusion_stopped_half_way_resumes_to_the_same_weights(runs, tmp_path):
    """Stopped, `hub fuse` wrote a checkpoint and said to resume with --resume, an option it
    did not have; and no two runs of it were alike (its sites' initial weights were drawn in
    an order that changes from one process to the next)."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    train, _ = sample_dataset()
    common = ["fuse", "--adapters", f"{runs / 'sst-a'},{runs / 'sst-b'}", "--train", train,
              "--max-steps", 60, "--batch-size", 8, "--checkpoint-every", 5, "--max-length",
              16, "--quiet"]

    def fuse(out, *more) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "hubcli", *map(str, common), "--out",
                                 str(out), *more], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})

    whole = fuse(tmp_path / "whole")
    assert whole.wait(timeout=300) == 0, whole.stderr.read()
    cut, ckpt = fuse(tmp_path / "cut"), tmp_path / "cut.ckpt"
    deadline = time.monotonic() + 120
    while not ckpt.exists():
        assert cut.poll() is None and time.monotonic() < deadline, cut.stderr.read()
        time.sleep(0.005)
    cut.send_signal(signal.SIGTERM)
    assert cut.wait(timeout=60) == 1
    assert "hint: run the same command with --resume to continue" in cut.stderr.read()
    resumed = fuse(tmp_path / "cut", "--resume")
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read()
    a, b = (load_file(str(tmp_path / d / "fusion.safetensors")) for d in ("whole", "cut"))
    assert a.keys() == b.keys() and max((a[k] - b[k]).abs().max().item() for k in a) < 1e-6
    assert not ckpt.exists()


def test_a_composed_adapter_is_not_written_over_its_components_nor_loops(runs, tmp_path):
    """`hub fuse --out` a component's folder (with --overwrite) replaced the component with a
    fusion requiring itself, which every command then met as a RecursionError traceback;
    inside it, it broke both. --log-json in no folder failed after the base loaded."""
    train, _ = sample_dataset()
    before = sha256_file(runs / "sst-a" / "adapter.safetensors")
    args = ["fuse", "--adapters", f"{runs / 'sst-a'},{runs / 'sst-b'}", "--train", train,
            "--max-steps", 1, "--quiet", "--overwrite"]
    for out, where in ((runs / "sst-a", "is the"), (runs / "sst-a" / "f", "is inside the")):
        r = run(*args, "--out", out)
        assert r.exit_code == 1 and f"{where} folder of the component" in r.stderr, r.output
    r = run("train", "--stack", runs / "sst-a", "--train", train, "--out", runs / "sst-a",
            "--overwrite", "--quiet")
    assert r.exit_code == 1 and "is the folder of the component" in r.stderr, r.output
    assert sha256_file(runs / "sst-a" / "adapter.safetensors") == before
    r = run(*args, "--out", tmp_path / "f", "--log-json", tmp_path / "no" / "log.jsonl")
    assert r.exit_code == 1 and "its folder does not exist" in r.stderr, r.output
    assert not (tmp_path / "f").exists()
    loop = tmp_path / "loop"  # what such an --out left: a stacked adapter requiring itself
    shutil.copytree(runs / "stacked", loop)
    m = manifest_io.read(loop)
    manifest_io.write(loop, {**m, "requires": [{**m["requires"][0], "path": "."}]})
    r = run("predict", "--allow-unsigned", loop, "dull")
    assert r.exit_code == 1, r.output
    error = next(line for line in r.stderr.splitlines() if line.startswith("error:"))
    assert error == (f"error: component stacked: its folder {loop.resolve()} is an adapter it "
                     "is composed of, or composed of it: a loop"), r.stderr


def test_fuse_takes_the_training_loop_options(runs, tmp_path):
    """`hub fuse --max-steps` (and the rest of hub train's loop options) were missing: a
    fusion could only be trained by whole epochs."""
    train, dev = sample_dataset()
    log = tmp_path / "log.jsonl"
    r = run("fuse", "--adapters", ",".join(str(runs / n) for n in COMPONENTS[:2]),
            "--train", train, "--validation", dev, "--out", tmp_path / "f", "--max-steps", 3,
            "--eval-every", 3, "--log-json", log, "--log-every", 1, "--device", "cpu",
            "--max-length", 32, "--quiet")
    assert r.exit_code == 0, r.output
    assert manifest_io.read(tmp_path / "f")["training"]["steps"] == 3
    assert [json.loads(line).get("step") for line in log.read_text().splitlines()
            if "loss" in json.loads(line)] == [1, 2, 3]
