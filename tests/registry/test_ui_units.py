"""The web UI's pure parts: SVG chart, Markdown rendering, query words, value formatting; and
the full-text index staying in step with pushes (SQLite triggers, PostgreSQL expression)."""

from __future__ import annotations

import math
import re

import pytest
from sqlalchemy import select, text

from conftest import new_signing_key
from factories import default_manifest
from registry_server.db import db
from registry_server.services import accounts
from registry_server.services import textsearch
from registry_server.ui import chart, present
from registry_server.ui.markdown import render_card, strip_front_matter
from ui_seed import DATABASES, make_app, publish, signed_bundle


def test_nice_ticks_cover_the_range_with_round_steps():
    assert chart.nice_ticks(0.4, 0.9) == [0.4, 0.6, 0.8, 1.0]
    assert chart.nice_ticks(0.7, 0.85) == [0.7, 0.75, 0.8, 0.85]
    assert chart.nice_ticks(0.0123, 2.7) == [0.0, 1.0, 2.0, 3.0]
    assert chart.nice_ticks(0.5, 0.5) == [0.45, 0.5, 0.55]  # a single value gets padded
    # An all-zero series (an F1 of 0 every epoch) reads 0 to 1, never -0.5 to 0.5.
    assert chart.nice_ticks(0.0, 0.0) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert chart.nice_ticks(0.01, 0.01)[0] >= 0


def test_chart_legend_names_validation_loss_and_overlapping_series():
    panel = chart.Panel("Scores", {"accuracy": [(1, 0.5), (2, 0.7)],
                                   "f1": [(1, 0.5), (2, 0.7)], "mcc": [(1, 0.1), (2, 0.3)]})
    assert panel.twins == {"f1": "accuracy"}  # drawn exactly over accuracy: the legend says so
    assert [c for _, c in panel.legend] == ["series-0", "series-1", "series-2"]  # own dashes
    assert chart.label("loss") == "validation loss" and chart.label("train_loss") == "train loss"
    svg = str(chart.render(chart.Panel("Loss", {"loss": [(1, 0.4)], "train_loss": [(1, 0.5)]}),
                           "l"))
    assert "validation loss, train loss for epochs 1 to 1</desc>" in svg


def test_panels_split_losses_from_scores_and_skip_bad_values():
    panels = chart.panels([{"epoch": 2, "accuracy": 0.8, "train_loss": 0.5},
                           {"epoch": 1, "accuracy": 0.7, "train_loss": 0.9, "loss": math.nan},
                           {"epoch": 3, "accuracy": True}])
    assert [(p.title, p.series) for p in panels] == [
        ("Loss", {"train_loss": [(1, 0.9), (2, 0.5)]}),
        ("Scores", {"accuracy": [(1, 0.7), (2, 0.8)]})]
    assert chart.panels([{"epoch": 1}]) == []


def test_chart_svg_places_points_and_escapes_names():
    panel = chart.Panel("Scores", {"<b>acc</b>": [(1, 0.5), (3, 1.0)]})
    svg = str(chart.render(panel, "c"))
    assert svg.startswith('<svg class="chart" viewBox="0 0 360 210" role="img"')
    assert '<polyline class="line series-0" points="44.0,145.0 350.0,10.0"/>' in svg
    assert "&lt;b&gt;acc&lt;/b&gt;, epoch 3: 1</title>" in svg and "<b>" not in svg
    assert panel.legend == [("<b>acc</b>", "series-0")]


def test_ablation_heatmap_shades_each_span_and_skips_what_it_cannot_draw():
    spans = [[0.9, 0.7, 0.5], [None, 0.88, 0.6], [None, None, 0.86]]
    svg = str(chart.ablation({"ablation": {"metric": "<i>acc</i>", "spans": spans}}))
    assert svg.count('<rect class="heat"') == 6
    assert 'fill-opacity="1.00"><title>layers 0-0 removed: 0.9</title>' in svg  # the highest
    assert 'fill-opacity="0.15"><title>layers 0-2 removed: 0.5</title>' in svg  # the lowest
    assert "&lt;i&gt;acc&lt;/i&gt;" in svg and "<i>" not in svg
    assert chart.ablation({}) is None and chart.ablation(None) is None
    assert chart.ablation({"ablation": {"spans": [[0.5, 0.4]]}}) is None  # not square
    assert chart.ablation({"ablation": {"spans": [[None]]}}) is None


def test_card_sections_shown_elsewhere_are_dropped_and_tables_scroll():
    from registry_server.ui.markdown import SHOWN_ELSEWHERE

    card = ("# sst2\n\nWhat it does.\n\n## Model details\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
            "## Training\n\n```\n## kept: inside a code block\n```\n\n| c |\n|---|\n| 3 |\n\n"
            "## How to use\n\n```bash\nhub pull NAMESPACE/sst2\n```\n")
    html = str(render_card(card, SHOWN_ELSEWHERE))
    assert "Model details" not in html and "NAMESPACE" not in html and "<td>1</td>" not in html
    assert "<h3>Training</h3>" in html and "## kept: inside a code block" in html
    assert ('<div class="table-scroll" tabindex="0" role="region" aria-label="Table from the '
            'model card"><table>') in html and '<pre tabindex="0">' in html
    assert "How to use" in str(render_card(card))  # nothing is dropped unless asked


def test_markdown_drops_front_matter_html_and_unsafe_links():
    card = "---\nlicense: mit\n---\n# Title\n\n<b>raw</b> [x](javascript:alert(1)) [ok](https://e.org)"
    html = str(render_card(card))
    assert html.startswith("<h2>Title</h2>")
    assert "&lt;b&gt;raw&lt;/b&gt;" in html and 'href="javascript' not in html
    assert '<a href="https://e.org" rel="nofollow ugc noopener">ok</a>' in html
    assert strip_front_matter("no front matter\n---\n") == "no front matter\n---\n"


def test_query_words_drop_search_syntax():
    assert textsearch.words('SST-2 "sent*" OR (x)') == ["sst", "2", "sent", "or", "x"]
    assert textsearch.words("  ") == []


def test_present_formats_values():
    assert present.filesize(1536) == "1.5 KiB" and present.filesize(12) == "12 B"
    assert present.number(12345) == "12,345" and present.number(0.123456) == "0.1235"
    assert present.short_hash("sha256:" + "ab" * 32) == "sha256:abababababab…"
    manifest = default_manifest()
    manifest["parameters"] = {"trainable": 2610, "base": 1_000_000, "share": 0.00261}
    rows = dict(present.architecture_rows(manifest))
    assert rows["Layers"] == "all 2" and rows["Trainable parameters"] == "2,610 (0.26% of the base)"
    assert "Form" not in rows  # Houlsby's own form
    manifest["architecture"]["reads"] = "input"
    assert dict(present.architecture_rows(manifest))["Form"] == "LN(h + f(x) + x)"
    del manifest["architecture"]["reads"]
    # The per-epoch "loss" is the validation loss; the training loss is never a tile.
    assert present.best_metrics(manifest) == [("accuracy", "0.85"), ("validation loss", "0.4")]
    assert present.primary_metric(manifest) == ("accuracy", "0.85")
    assert present.best_metrics({}) == [] and present.primary_metric({}) is None
    manifest["metrics"]["best"] = {"accuracy": 0.5, "train_loss": 0.1}
    assert present.best_metrics(manifest) == [("accuracy", "0.5")]
    assert present.plural(1, "download") == "1 download"
    assert present.plural(1234, "download") == "1,234 downloads"
    assert present.license_of({"license": "mit"}, "") == "mit"
    assert present.license_of({}, "---\nlicense: 'apache-2.0'\n---\n# x") == "apache-2.0"
    assert present.license_of({}, "# no front matter\nlicense: mit") is None


@pytest.mark.parametrize("best, analysis, expected", [
    ({"f1": 0.0, "accuracy": 0.9}, None, ["f1 is 0"]),
    ({"macro_f1": 0.0, "precision": 0.0}, None, ["macro f1, precision are 0"]),
    ({"accuracy": 0.51}, {"ablation": {"majority": 0.51}}, ["no better than always answering"]),
    ({"accuracy": 0.86, "f1": 0.85}, {"ablation": {"majority": 0.51}}, []),
    ({"accuracy": 0.51}, None, []),  # the majority rate is unknown: no guess
    ({"loss": 0.0, "train_loss": 0.0}, None, []),  # a zero loss is no F1
])
def test_degenerate_metrics_are_flagged(best, analysis, expected):
    manifest = default_manifest()
    manifest["metrics"]["best"] = best
    if analysis:
        manifest["analysis"] = analysis
    warnings = present.metric_warnings(manifest)
    assert len(warnings) == len(expected)
    assert all(part in w for part, w in zip(expected, warnings))


@pytest.mark.parametrize("kind", DATABASES)
def test_search_index_follows_new_versions(kind, tmp_path, monkeypatch):
    monkeypatch.setenv("HUB_HOME", str(tmp_path / "hub_home"))
    apps = make_app(kind, tmp_path)
    app = next(apps)
    key = new_signing_key(tmp_path / "keys")
    with db.session_scope(app) as session:
        accounts.add_public_key(session, accounts.create_user(session, "alice"), key.public_pem)
    client = app.test_client()

    def found(word: str) -> bool:
        return "alice/</span>probe" in client.get(f"/search?q={word}").get_data(as_text=True)

    publish(app, "alice", signed_bundle(tmp_path / "v1", key, name="probe",
                                        description="Aardvark detector."))
    assert found("aardvark") and not found("zebra")
    publish(app, "alice", signed_bundle(tmp_path / "v2", key, name="probe", version="1.1.0",
                                        description="Zebra detector."))
    assert found("zebra") and not found("aardvark")
    if kind == "sqlite":
        with db.engine(app).connect() as conn:
            triggers = conn.execute(text("SELECT name FROM sqlite_master WHERE type='trigger'"))
            assert {"adapters_fts_insert", "adapters_fts_update",
                    "adapters_fts_delete"} <= {name for (name,) in triggers}
    next(apps, None)


@pytest.mark.parametrize("kind", DATABASES)
def test_best_match_ranks_names_above_card_boilerplate(kind, tmp_path, monkeypatch):
    """12 popular adapters whose model cards mention "sentiment" (as generated cards mention
    their task) and one unpopular adapter named for it: the query puts the named one first;
    an owner's name finds the owner's adapters."""
    from registry_server.models import Adapter

    monkeypatch.setenv("HUB_HOME", str(tmp_path / "hub_home"))
    apps = make_app(kind, tmp_path)
    app = next(apps)
    key = new_signing_key(tmp_path / "keys")
    with db.session_scope(app) as session:
        accounts.add_public_key(session, accounts.create_user(session, "alice"), key.public_pem)
        accounts.create_user(session, "zoe")
    publish(app, "alice", signed_bundle(tmp_path / "b", key, name="seed"))
    with db.session_scope(app) as session:
        latest = session.scalar(select(Adapter)).latest_version_id
        ids = {name: accounts.get_namespace(session, name).id for name in ("alice", "zoe")}
        rows = [("alice", f"model-{i}", "A text classifier.", 100 + i) for i in range(12)]
        rows += [("alice", "tweet-sentiment", "Polarity of tweets.", 0),
                 ("zoe", "reviews", "Sentiment of product reviews.", 1)]
        for owner, name, description, downloads in rows:
            session.add(Adapter(namespace_id=ids[owner], name=name, description=description,
                                downloads=downloads, latest_version_id=latest,
                                search_text=f"{name}\n{description}\n\n"
                                            "## how to use\nany sentiment or topic task".lower()))
        session.commit()
    client = app.test_client()

    def ranked(query: str) -> list[str]:
        html = client.get("/search", query_string={"q": query}).get_data(as_text=True)
        return re.findall(r'<span class="ns">([^<]+)/</span>([^<]+)</a>', html)

    by_relevance = ranked("sentiment")
    assert by_relevance[:2] == [("alice", "tweet-sentiment"), ("zoe", "reviews")]
    assert len(by_relevance) == 15  # every card matches (seed's generated one too)
    by_downloads = client.get("/search?q=sentiment&sort=downloads").get_data(as_text=True)
    assert "model-11" in by_downloads.split("tweet-sentiment")[0]
    assert ranked("zoe") == [("zoe", "reviews")]  # an owner's name
    assert ranked("tweet sentiment")[0] == ("alice", "tweet-sentiment")
    next(apps, None)
