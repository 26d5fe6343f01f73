"""The adapter page's "Try it" box against a stub of `hub serve`'s /v1/predict (a thread of
http.server answering as hub serve does): what is forwarded, how labels, entities and
refusals show, and that the box is absent without HUB_REGISTRY_INFERENCE_URL."""

from __future__ import annotations

import pytest

from registry_server.ui import tryit
from ui_seed import NER_TEXT, Stub, csrf_token, seeded_app, stub_url  # noqa: F401  (fixtures)

@pytest.fixture
def client(seeded_app, stub_url, monkeypatch):  # noqa: F811
    monkeypatch.setitem(seeded_app.config, "INFERENCE_URL", stub_url)
    Stub.received.clear()
    return seeded_app.test_client()


def try_text(client, page: str, text: str, version: str):
    token = csrf_token(client.get(page).get_data(as_text=True))
    return client.post(f"{page}/try", data={"csrf_token": token, "text": text,
                                            "version": version})


def test_no_box_without_an_inference_server(seeded_app):  # noqa: F811
    client = seeded_app.test_client()
    assert seeded_app.config["INFERENCE_URL"] == ""
    assert 'id="try-h"' not in client.get("/alice/sst2-sentiment").get_data(as_text=True)
    token = csrf_token(client.get("/login").get_data(as_text=True))
    r = client.post("/alice/sst2-sentiment/try", data={"csrf_token": token, "text": "x",
                                                       "version": "1.1.0"})
    assert r.status_code == 404


def test_a_label_with_its_score(client):
    html = client.get("/alice/sst2-sentiment").get_data(as_text=True)
    assert 'id="try-h">Try it</h2>' in html and "a gripping, beautifully acted film</textarea>" in html
    r = try_text(client, "/alice/sst2-sentiment", "  what a film ", "1.1.0")
    assert r.status_code == 200
    assert Stub.received == [{"path": "/v1/predict", "adapter": "alice/sst2-sentiment@1.1.0",
                              "inputs": ["what a film"]}]
    result = r.get_data(as_text=True).split('id="try-result"')[1].split("</div>")[0]
    assert '<span class="label-name">positive</span>' in result and "93.0%" in result
    assert 'value="0.93"' in result  # the <meter>
    assert "what a film</textarea>" in r.get_data(as_text=True)  # the text stays in the box


def test_entities_highlighted_in_the_text(client):
    r = try_text(client, "/alice/conll-ner", NER_TEXT, "1.0.0")
    html = r.get_data(as_text=True)
    assert ('<mark class="entity" title="PER, score 0.91">Angela Merkel <span class="entity-type">'
            'PER</span></mark> visited <mark class="entity" title="LOC, score 0.88">Paris '
            '<span class="entity-type">LOC</span></mark> .</p>') in html
    assert "<strong>Paris</strong> LOC <span class=\"meta\">88.0%</span>" in html


def test_an_older_version_is_asked_for_by_its_number(client):
    r = try_text(client, "/alice/sst2-sentiment", "fine", "1.0.0")
    assert Stub.received[-1]["adapter"] == "alice/sst2-sentiment@1.0.0"
    assert ("The inference server refused: adapter &#39;alice/sst2-sentiment@1.0.0&#39; is not "
            "served (start hub serve with --allow-pull).") in r.get_data(as_text=True)


def test_refusals_and_an_unreachable_server_are_explained_in_the_box(client, seeded_app):  # noqa: F811
    r = try_text(client, "/alice/sst2-sentiment", "   ", "1.1.0")
    assert r.status_code == 200 and "Type a text to run the adapter on." in r.get_data(as_text=True)
    assert try_text(client, "/alice/sst2-sentiment", "x" * 2001, "1.1.0").status_code == 200
    assert Stub.received == []  # neither was sent
    seeded_app.config["INFERENCE_URL"] = "http://127.0.0.1:9"  # discard port: nothing listens
    r = try_text(client, "/alice/sst2-sentiment", "fine", "1.1.0")
    assert r.status_code == 200
    assert "The inference server cannot be reached right now." in r.get_data(as_text=True)


def test_private_adapters_are_not_tried_for_outsiders(client):
    token = csrf_token(client.get("/login").get_data(as_text=True))
    r = client.post("/acme/secret-adapter/try", data={"csrf_token": token, "text": "x",
                                                      "version": "1.0.0"})
    assert r.status_code == 404 and Stub.received == []


def test_entities_outside_the_text_or_overlapping_are_not_highlighted():
    outcome = tryit.Outcome("ab cd", row={"entities": [
        {"start": 0, "end": 2, "type": "X"}, {"start": 1, "end": 4, "type": "Y"},
        {"start": 3, "end": 9, "type": "Z"}, {"start": "3", "end": 5}]})
    assert outcome.segments == [("ab", {"start": 0, "end": 2, "type": "X"}), (" cd", None)]
    assert len(outcome.entities) == 3  # still listed under the text
