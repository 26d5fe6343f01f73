"""Publishable adapter bundles: what a bundle may hold, how it is checked, and its model card.

A bundle is a flat folder holding exactly manifest.json, adapter.safetensors, README.md (the
model card) and, once signed, model.sig. Torch-free: the registry server checks uploads with
`check_bundle`.
"""

from hubcli.bundle.build import make_bundle
from hubcli.bundle.card import render_model_card
from hubcli.format.bundle_rules import ALLOWED_FILES, README, SIGNATURE, check_bundle
from hubcli.format.safetensors_header import read_safetensors_header

__all__ = ["ALLOWED_FILES", "README", "SIGNATURE", "check_bundle", "make_bundle",
           "read_safetensors_header", "render_model_card"]
