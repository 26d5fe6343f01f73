"""Web UI pages through the Flask test client, over SQLite and PostgreSQL: what each page
shows, status codes, error pages (HTML for pages, JSON for the API), sanitised model cards,
security headers."""

from __future__ import annotations

import re

import pytest

from registry_server.ui import views_browse
from ui_seed import seeded_app, sign_in  # noqa: F401  (fixture)


@pytest.fixture
def client(seeded_app):  # noqa: F811
    return seeded_app.test_client()


def names(html: str) -> list[str]:
    """The adapters a listing shows, in order."""
    return re.findall(r'<span class="ns">([^<]+)/</span>([^<]+)</a>', html)


def text(response) -> str:
    return response.get_data(as_text=True)


def test_home_shows_counts_and_both_lists(client):
    r = client.get("/")
    assert r.status_code == 200 and r.mimetype == "text/html"
    html = text(r)
    # Public adapters only: acme's private one is not counted. 0.9.0 is yanked, not deleted.
    assert "<strong>3</strong> adapters" in html
    assert "<strong>5</strong> versions" in html
    assert "<strong>2</strong> base models" in html
    popular, recent = html.split('id="recent-h"')
    assert names(popular) == [("alice", "sst2-sentiment"), ("alice", "conll-ner"),
                              ("bob", "evil-card")]
    assert names(recent) == [("bob", "evil-card"), ("alice", "conll-ner"),
                             ("alice", "sst2-sentiment")]
    assert 'href="/search?tag=sentiment"' in html


@pytest.mark.parametrize("query, expected", [
    ("movie reviews", [("alice", "sst2-sentiment")]),  # description
    ("CoNLL", [("alice", "conll-ner")]),  # name and description, case-insensitive
    ("bold", [("bob", "evil-card")]),  # model card body only
    ("sent", [("alice", "sst2-sentiment"), ("bob", "evil-card")]),  # word prefix (tag)
    ("internal", []),  # only in the private adapter of acme
    ("bob", [("bob", "evil-card")]),  # an owner's name
    ('"unbalanced AND (', []),  # FTS syntax in user input is inert
])
def test_search_text(client, query, expected):
    r = client.get("/search", query_string={"q": query})
    assert r.status_code == 200
    assert names(text(r)) == expected


def test_search_words_may_name_the_owner_and_the_adapter(client):
    # conll-ner's card mentions its sst2_train.tsv too, but the name decides the order.
    found = names(text(client.get("/search?q=alice+sst2")))
    assert found == [("alice", "sst2-sentiment"), ("alice", "conll-ner")]


@pytest.mark.parametrize("args, expected", [
    ({"task": "tagging"}, ["conll-ner"]),
    ({"head_type": "sequence_classification"}, ["sst2-sentiment", "evil-card"]),
    ({"base_model": "bert-base-cased"}, ["conll-ner"]),
    ({"base_model": "BASE-Cased"}, ["conll-ner"]),  # any case, any part (as hub search --base)
    ({"base_hash": "ef" * 32}, ["conll-ner"]),  # bare hex gets its sha256: prefix
    ({"base_hash": "sha256:" + "ab" * 32}, ["sst2-sentiment", "evil-card"]),
    ({"tag": "english"}, ["sst2-sentiment"]),
    ({"tag": "sentiment, english"}, ["sst2-sentiment"]),
    ({"signed": "1"}, ["sst2-sentiment", "conll-ner", "evil-card"]),
    ({"q": "sentiment", "sort": "recent"}, ["evil-card", "sst2-sentiment"]),
    ({"sort": "bogus"}, ["sst2-sentiment", "conll-ner", "evil-card"]),
])
def test_search_filters_and_sorts(client, args, expected):
    html = text(client.get("/search", query_string=args))
    assert [name for _, name in names(html)] == expected


def test_search_form_reflects_the_bookmarked_url(client):
    html = text(client.get("/search?q=sst&task=classification&tag=english&signed=1&sort=recent"))
    assert 'name="q" value="sst"' in html
    assert '<option value="classification" selected>' in html
    assert '<option value="recent" selected>' in html
    assert 'name="tag" value="english"' in html
    assert 'name="signed" value="1" checked' in html
    # The chip removing the tag keeps the rest of the search.
    assert 'href="/search?q=sst&amp;task=classification&amp;signed=1&amp;sort=recent"' in html


def test_search_paginates(client, monkeypatch):
    monkeypatch.setattr(views_browse, "PER_PAGE", 2)
    first = text(client.get("/search?q=a"))
    assert "3 adapters" in first and "Page 1 of 2" in first
    assert [n for _, n in names(first)] == ["sst2-sentiment", "conll-ner"]
    assert 'rel="next" href="/search?q=a&amp;page=2"' in first
    second = text(client.get("/search?q=a&page=2"))
    assert [n for _, n in names(second)] == ["evil-card"]
    assert 'rel="prev" href="/search?q=a&amp;page=1"' in second
    beyond = text(client.get("/search?q=a&page=7"))
    assert "There is no page 7" in beyond


def test_search_empty_state(client):
    html = text(client.get("/search?q=zzzzzz"))
    assert "0 adapters" in html and "No adapter matches this search." in html


def test_adapter_page_shows_the_manifest_at_a_glance(client):
    r = client.get("/alice/sst2-sentiment")
    assert r.status_code == 200
    html = text(r)
    assert "<h1>sst2-sentiment" in html and "v1.1.0" in html
    assert "hub pull alice/sst2-sentiment@1.1.0" in html
    assert "sha256:" + "ab" * 32 in html  # base content hash
    assert "Compatible bases:" in html and "2 adapters for this base" in html
    assert "4 (each adapter maps d → 4 → d)" in html
    assert "attention output, ffn output" in html
    assert "<code>negative</code>" in html and "<code>positive</code>" in html
    assert '<span class="metric-name">accuracy</span> <span class="metric-value">0.86</span>' in html
    # The training curve: two inline SVG panels, three points per series.
    assert html.count('<svg class="chart"') == 2
    assert html.count('<circle class="dot series-0"') == 3 + 3
    assert "train loss" in html and "validation loss" in html
    assert "5 downloads (5 of this version)" in html
    assert "license apache-2.0" in html
    # `hub ablate --record`'s heatmap: one cell per span of layers, with the majority class
    assert html.count('<rect class="heat"') == 3
    assert "layers 0-1 removed: 0.52</title>" in html and "majority class 0.51" in html


def test_signature_and_primary_metric_come_first(client):
    html = text(client.get("/alice/sst2-sentiment"))
    header = html.split('<header class="page-header adapter-header">')[1].split("</header>")[0]
    assert "signed by alice</span>" in header and "accuracy <strong>0.86</strong>" in header
    assert "degenerate" not in html
    # Every result card says the same, and the metric the adapter was selected by.
    cards = text(client.get("/search?q=sent")).split('<li class="adapter-item">')[1:]
    assert len(cards) == 2
    assert all("signed by " in card for card in cards)
    assert "accuracy <strong>0.86</strong>" in cards[0]
    assert "5 downloads" in cards[0]


def test_use_it_offers_pull_predict_python_and_huggingface_hub(client):
    html = text(client.get("/alice/conll-ner"))
    use = html[html.index('id="use-h"'):html.index('id="base-h"')]
    assert "hub pull alice/conll-ner@1.0.0" in use
    assert "hub predict alice/conll-ner@1.0.0 &#34;Angela Merkel visited Paris .&#34;" in use
    assert "pull(&#34;alice/conll-ner@1.0.0&#34;, registry_remote(&#34;http://localhost&#34;))" in use
    assert "AdapterHub(base=&#34;bert-base-cased&#34;)" in use
    assert 'os.environ[&#34;HF_ENDPOINT&#34;] = &#34;http://localhost&#34;' in use
    assert 'snapshot_download(&#34;alice/conll-ner&#34;, revision=&#34;1.0.0&#34;)' in use
    assert use.count("data-copy") == 3
    # The card's own usage section (with its NAMESPACE placeholder) and the facts shown
    # beside it are left out of the rendered card.
    card = html[html.index('<article class="markdown">'):html.index("</article>")]
    assert "NAMESPACE" not in html and "Model details" not in card


def test_adapter_page_lists_files_signature_and_versions(client, seeded_app):
    from registry_server.db import db
    from registry_server.services import repos

    with db.session_scope(seeded_app) as session:
        latest = repos.find_adapter(session, "alice", "sst2-sentiment").latest
        files = {f.path: (f.blob_sha256, f.blob.size) for f in latest.files}
        key_id = latest.signer_key_id
    html = text(client.get("/alice/sst2-sentiment"))
    for path, (sha256, size) in files.items():
        assert f">{path}</strong>" in html and sha256 in html
    assert "12.9 KiB" in html or any(size < 1024 for _, size in files.values())
    assert "Signed by a key registered to" in html and key_id in html
    versions = html[html.index('id="versions-h"'):]
    assert re.findall(r'/versions/([\d.]+)">', versions) == ["1.1.0", "1.0.0", "0.9.0"]
    assert "Yanked: labels were swapped" in versions


def test_version_page_of_a_yanked_version(client):
    html = text(client.get("/alice/sst2-sentiment/versions/0.9.0"))
    assert "Version 0.9.0 is yanked</strong>: labels were swapped" in html
    assert 'The latest is\n    <a href="/alice/sst2-sentiment">1.1.0</a>' in html
    assert "hub pull alice/sst2-sentiment@0.9.0" in html


@pytest.mark.parametrize("url", ["/nobody/nothing", "/alice/nothing",
                                 "/alice/sst2-sentiment/versions/9.9.9", "/nobody"])
def test_missing_things_are_html_404s(client, url):
    r = client.get(url)
    assert r.status_code == 404 and r.mimetype == "text/html"
    assert "Not Found" in text(r)
    guess = url.split("/")[2] if url.count("/") > 1 else url.strip("/")
    assert f'<a href="/search?q={guess}">Search for “{guess}”</a>' in text(r)


def test_private_adapter_is_404_to_others_and_visible_to_members(seeded_app):
    # The same answer as for an adapter that does not exist: nothing confirms it is there.
    anonymous = seeded_app.test_client()
    r = anonymous.get("/acme/secret-adapter")
    assert r.status_code == 404 and "private" not in text(r)
    assert "There is no adapter acme/secret-adapter that you can see without signing in." in text(r)
    bob = seeded_app.test_client()
    sign_in(bob, "bob")
    r = bob.get("/acme/secret-adapter")
    assert r.status_code == 404 and "There is no adapter acme/secret-adapter." in text(r)
    assert text(bob.get("/acme/no-such-adapter")).replace("no-such-adapter", "secret-adapter") \
        == text(r)
    alice = seeded_app.test_client()
    sign_in(alice, "alice")
    r = alice.get("/acme/secret-adapter")
    assert r.status_code == 200 and '<span class="badge private">private</span>' in text(r)
    assert [n for _, n in names(text(alice.get("/search?q=internal")))] == ["secret-adapter"]


def test_user_and_organisation_pages(seeded_app):
    client = seeded_app.test_client()
    alice = text(client.get("/alice"))
    assert [n for _, n in names(alice)] == ["conll-ner", "sst2-sentiment"]
    assert 'Member of:\n    <a href="/acme">acme</a>' in alice
    acme = text(client.get("/acme"))
    assert "organisation" in acme and "acme has not published an adapter yet." in acme
    sign_in(client, "alice")
    assert [n for _, n in names(text(client.get("/acme")))] == ["secret-adapter"]


def test_model_card_is_sanitised(client):
    html = text(client.get("/bob/evil-card"))
    card = html[html.index('<article class="markdown">'):html.index("</article>")]
    assert "<script" not in card and "onerror=" not in card.replace("onerror=&quot;", "")
    assert "&lt;script&gt;" in card  # shown as text, not run
    assert "javascript:" not in re.sub(r">[^<]*<", "><", card)  # in no attribute
    assert "secret_front_matter" not in html  # the YAML front matter is not shown
    assert "<strong>bold</strong>" in card
    assert "<h2>Evil card</h2>" in card  # headings move down a level below the page's <h1>


def test_api_errors_stay_json(client):
    r = client.get("/api/v1/adapters/nobody/nothing")
    assert r.mimetype == "application/json" and r.json["code"] == "RepoNotFound"
    r = client.get("/nobody/nothing/resolve/main/manifest.json")
    assert r.mimetype == "application/json"


def test_security_headers_and_static_assets(client):
    r = client.get("/")
    assert "script-src 'self'" in r.headers["Content-Security-Policy"]
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    for asset, kind in (("style.css", "text/css"), ("app.js", "text/javascript"),
                        ("favicon.svg", "image/svg+xml")):
        r = client.get(f"/static/ui/{asset}")
        assert r.status_code == 200 and r.mimetype == kind
