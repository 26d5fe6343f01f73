"""Shared fixtures. Every test gets its own HUB_HOME so nothing leaks into ~/.config/hub."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(autouse=True)
def hub_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("hub_home")
    monkeypatch.setenv("HUB_HOME", str(home))
    monkeypatch.delenv("HUB_TOKEN", raising=False)
    monkeypatch.delenv("HUB_ENDPOINT", raising=False)
    monkeypatch.delenv("HUB_KEY_PASSPHRASE", raising=False)
    return home
