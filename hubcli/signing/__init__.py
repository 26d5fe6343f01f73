"""Signing and verifying bundles (OpenSSF model-signing format, key method), signing keys,
the trust store, and the attach policy. Torch-free.

Modules: `keys` (key pairs, key ids), `trust` (trusted public keys), `sign` (`hub keygen`,
`hub sign`), `verify` (`hub verify`, `verify_signature` for the registry), `policy` (may a
folder be attached?), `verdicts` (signatures attach verified before, by exact bytes),
`upstream` (the model-signing parts we use; slow to import, so the other modules import it only
when a signature is actually made or read and no verdict is remembered).
"""
