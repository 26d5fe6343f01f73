"""The web UI in a real browser: headless Debian Chromium driven by Playwright, against a
registry served over HTTP on a free localhost port, seeded with signed adapters.

Screenshots of the adapter page (desktop and phone width) are saved in the test's temp folder
and their paths printed (`pytest -s` shows them).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import new_signing_key, signed_bundle, start_registry
from ui_seed import NER_TEXT, PASSWORD, Stub, publish, seed, stub_url  # noqa: F401 (fixture)

CHROMIUM = "/usr/bin/chromium"
pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                 reason=f"{CHROMIUM} is missing (apt-get install chromium)")]
DESKTOP, PHONE = {"width": 1280, "height": 900}, {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("ui-browser")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HUB_HOME", str(root / "hub_home"))
        registry, stop = start_registry({"INSTANCE_PATH": str(root / "instance"),
                                         "DATABASE_URL": f"sqlite:///{root / 'registry.db'}",
                                         "SECRET_KEY": "test-secret"})
        keys = root / "keys"
        bob_key = new_signing_key(keys)
        seed(registry.app, root / "bundles", new_signing_key(keys), bob_key)
        # An adapter that learnt nothing: F1 0 at every epoch.
        flat = [{"epoch": e, "loss": 0.69, "accuracy": 0.5, "f1": 0.0} for e in (1, 2, 3)]
        publish(registry.app, "bob", signed_bundle(
            root / "bundles" / "coin", bob_key, name="coin-flip", description="Spam or ham.",
            metrics={"validation": flat, "best": {"accuracy": 0.5, "f1": 0.0}, "primary": "f1"}))
    yield registry
    stop()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, server):
    context = browser.new_context(viewport=DESKTOP, base_url=server.url)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.url)
    yield context.new_page()
    context.close()


def result_names(page) -> list[str]:
    return page.locator("#results .adapter-item h3 a").all_inner_texts()


def test_search_filter_and_live_search(page):
    page.goto("/")
    page.get_by_role("searchbox", name="Search adapters").fill("sent")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/search\?q=sent$"))
    # Best match: the name first, then the two whose tag matches (the newer first).
    assert result_names(page) == ["alice/sst2-sentiment", "bob/coin-flip", "bob/evil-card"]
    page.locator("#results").get_by_role("link", name="english").first.click()
    page.wait_for_url(re.compile(r"tag=english"))
    assert result_names(page) == ["alice/sst2-sentiment"]
    # Live search: typing updates the results and the URL without submitting the form.
    page.goto("/search")
    # The results heading stays one live region (a screen reader announces the new count).
    page.evaluate("document.getElementById('results-h').dataset.marker = 'kept'")
    page.locator("#q").press_sequentially("conll", delay=20)
    page.wait_for_url(re.compile(r"/search\?q=conll"))
    page.wait_for_function("document.querySelectorAll('#results .adapter-item').length === 1")
    assert result_names(page) == ["alice/conll-ner"]
    heading = page.locator("#results-h")
    assert heading.get_attribute("data-marker") == "kept" and heading.get_attribute("aria-live")
    expect_text(page, "#results-h", "1 adapter matching “conll”")
    page.select_option("#task", "classification")
    page.wait_for_url(re.compile(r"task=classification"))
    expect_text(page, "#results-h", "0 adapters")


def expect_text(page, selector: str, text: str) -> None:
    from playwright.sync_api import expect

    expect(page.locator(selector)).to_contain_text(text)


def test_adapter_page(page, tmp_path):
    page.goto("/search?q=sst2")
    page.get_by_role("link", name="alice/sst2-sentiment").click()
    page.wait_for_url(re.compile(r"/alice/sst2-sentiment$"))
    assert page.locator("h1").inner_text().startswith("sst2-sentiment")
    tiles = page.locator(".metric-tiles li").all_inner_texts()
    assert [t.split() for t in tiles] == [["accuracy", "0.86"], ["f1", "0.85"]]
    assert page.locator("ol.labels li").all_inner_texts() == ["negative", "positive"]
    assert "Signed by a key registered to alice, who published it." in page.locator(".sig").inner_text()
    versions = page.locator("ol.versions > li")
    assert versions.count() == 3
    assert "yanked" in versions.nth(2).inner_text() and "labels were swapped" in versions.nth(2).inner_text()
    curves = page.locator("svg.chart:not(.heatmap)")
    assert curves.count() == 2 and curves.first.is_visible()
    assert page.locator("svg.heatmap rect.heat").count() == 3  # the recorded layer ablation
    header = page.locator(".adapter-header .trust")
    assert header.get_by_text("signed by alice").is_visible()
    assert header.get_by_text("accuracy 0.86").is_visible()
    page.get_by_role("button", name="Copy Pull and predict commands").click()
    assert page.evaluate("navigator.clipboard.readText()") == (
        "hub pull alice/sst2-sentiment@1.1.0   # checks the signature and every digest\n"
        'hub predict alice/sst2-sentiment@1.1.0 "a gripping, beautifully acted film"')
    page.get_by_role("button", name="Copy huggingface_hub snippet").click()
    assert f'os.environ["HF_ENDPOINT"] = "{page.url.rsplit("/", 2)[0]}"' in page.evaluate(
        "navigator.clipboard.readText()")
    shot = tmp_path / "adapter-desktop.png"
    page.screenshot(path=str(shot), full_page=True)
    page.set_viewport_size(PHONE)
    # Nothing is wider than a phone screen (wide tables scroll inside their own box).
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    # On a phone the metrics and the model card come before the long facts column.
    tops = page.evaluate("""['#metrics-h', '#card-h', '#use-h', '#base-h'].map(
        s => document.querySelector(s).getBoundingClientRect().top)""")
    assert tops == sorted(tops)
    phone = tmp_path / "adapter-phone.png"
    page.screenshot(path=str(phone), full_page=True)
    print(f"\nadapter page screenshots: {shot} {phone}")
    assert shot.stat().st_size > 10_000 and phone.stat().st_size > 10_000


def test_degenerate_metrics_are_flagged_on_cards_and_the_page(page):
    page.goto("/search?q=coin")
    card = page.locator("#results .adapter-item")
    assert card.count() == 1
    assert card.get_by_text("degenerate metrics").is_visible()
    assert card.get_by_text("f1 0", exact=True).is_visible()
    assert card.get_by_text("signed by bob").is_visible()
    page.goto("/bob/coin-flip")
    warning = page.locator(".metric-warning")
    assert warning.is_visible() and "F1 is 0: the model finds no correct positive" in warning.inner_text()
    # The all-zero f1 series lies on the bottom of the axis, which does not go below 0.
    ticks = page.locator("svg.chart").nth(1).locator("text.tick").all_text_contents()
    assert ticks[0] == "0" and not any(t.startswith("-") for t in ticks)
    assert page.locator("figcaption", has_text="validation loss").count() == 1


PAGES = ["/", "/search", "/search?q=sent", "/alice", "/acme", "/alice/sst2-sentiment",
         "/alice/sst2-sentiment/versions/0.9.0", "/alice/conll-ner", "/bob/evil-card",
         "/bob/coin-flip", "/login", "/login/password", "/logout", "/nobody/nothing"]


def test_no_page_scrolls_sideways_on_a_phone(browser, server):
    context = browser.new_context(viewport=PHONE, base_url=server.url)
    page = context.new_page()

    def check(urls: list[str]) -> None:
        for url in urls:
            page.goto(url)
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= PHONE["width"], f"{url} is {width} px wide on a phone"

    check(PAGES)
    page.goto("/login")
    page.get_by_label("User name").fill("alice")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(r"/$"))
    check(["/settings", "/acme", "/acme/secret-adapter"])
    context.close()


def test_sign_in_create_and_revoke_a_token(page):
    page.goto("/alice/sst2-sentiment")
    page.get_by_role("link", name="Sign in").click()
    page.get_by_label("User name").fill("alice")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(r"/alice/sst2-sentiment$"))  # back where the user was
    page.get_by_role("link", name="Settings").click()
    page.get_by_label("Name", exact=True).fill("browser")
    page.get_by_label("write").check()
    page.get_by_role("button", name="Create token").click()
    page.wait_for_url(re.compile(r"/settings#tokens$"))
    secret = page.locator(".new-token code").inner_text()
    assert secret.startswith("hubr_") and "shown only this once" in page.content()
    page.set_viewport_size(PHONE)
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    page.set_viewport_size(DESKTOP)
    page.reload()  # creates nothing and no longer shows the secret
    assert secret not in page.content()
    assert page.locator("#tokens tbody tr", has_text="browser").count() == 1
    row = page.locator("tr", has_text="browser")
    row.locator("summary[aria-label='Revoke token browser…']").click()  # unfolds, posts nothing
    assert page.locator("#tokens tbody tr", has_text="browser").count() == 1
    row.get_by_role("button", name="Yes, revoke browser").click()
    expect_text(page, ".flashes", "Token 'browser' is revoked.")
    assert page.locator("#tokens tbody tr", has_text="browser").count() == 0
    page.get_by_text("Revoked tokens").click()
    expect_text(page, ".revoked-tokens", "browser")
    # Keys are added with `hub keys upload` (proof of the private key), not by a web form.
    expect_text(page, "#keys", "hub keys upload signs a one-time challenge")
    assert page.locator("#keys textarea").count() == 0
    assert page.locator("#keys .key-list li").count() == 1
    page.set_viewport_size(PHONE)
    page.locator("summary[aria-label='Remove key alice laptop…']").click()
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    assert page.get_by_role("button", name="Yes, remove alice laptop").is_visible()
    page.set_viewport_size(DESKTOP)
    page.get_by_role("button", name="Sign out").click()
    expect_text(page, ".flashes", "You are signed out.")


def test_keyboard_and_no_javascript(browser, server):
    context = browser.new_context(viewport=DESKTOP, base_url=server.url, java_script_enabled=False)
    page = context.new_page()
    page.goto("/")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    page.fill("#home-q", "ner")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/search\?q=ner"))
    assert result_names(page) == ["alice/conll-ner"]
    page.goto("/alice/conll-ner")
    # Without JavaScript there is no copy button, but the command is there to select.
    assert page.locator(".copy-button").count() == 0
    assert page.locator("[data-copy]").first.inner_text().startswith(
        "hub pull alice/conll-ner@1.0.0")
    assert page.locator("ol.labels li").all_inner_texts() == ["O", "B-PER", "I-PER", "B-LOC",
                                                             "I-LOC"]
    context.close()


@pytest.mark.parametrize("javascript", [True, False])
def test_try_it_box(browser, server, stub_url, monkeypatch, javascript):
    monkeypatch.setitem(server.app.config, "INFERENCE_URL", stub_url)
    context = browser.new_context(viewport=PHONE, base_url=server.url,
                                  java_script_enabled=javascript)
    page = context.new_page()
    page.goto("/alice/conll-ner")
    box = page.locator("#try")
    assert box.get_by_label("Text for version 1.0.0").input_value() == NER_TEXT
    before = page.evaluate("performance.getEntriesByType('navigation').length && "
                           "performance.timeOrigin")
    box.get_by_role("button", name="Run").click()
    page.wait_for_selector("#try-result mark.entity")
    marks = page.locator("#try-result mark.entity").all_inner_texts()
    assert [m.split() for m in marks] == [["Angela", "Merkel", "PER"], ["Paris", "LOC"]]
    # With JavaScript the page answers in place; without, the form posts and the page reloads.
    same_page = page.evaluate("performance.timeOrigin") == before
    assert same_page is javascript
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    context.close()


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_axe_finds_nothing_serious(browser, server, stub_url, monkeypatch, viewport):
    """axe-core (the axe-playwright-python package) on every page, signed out and in, with a
    Try-it answer shown: no serious or critical finding."""
    from axe_playwright_python.sync_playwright import Axe

    monkeypatch.setitem(server.app.config, "INFERENCE_URL", stub_url)
    context = browser.new_context(viewport=viewport, base_url=server.url)
    page, axe, found = context.new_page(), Axe(), {}

    def audit(label: str) -> None:
        for v in axe.run(page).response["violations"]:
            if v["impact"] in ("serious", "critical"):
                found[f"{label}: {v['id']}"] = [n["target"] for n in v["nodes"]][:3]

    for url in PAGES:
        page.goto(url)
        audit(url)
    page.goto("/alice/conll-ner")
    page.locator("#try").get_by_role("button", name="Run").click()
    page.wait_for_selector("#try-result mark.entity")
    audit("try it")
    page.goto("/login")
    page.get_by_label("User name").fill("alice")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(r"/$"))
    for url in ("/settings", "/acme/secret-adapter"):
        page.goto(url)
        audit(url)
    context.close()
    assert found == {}
