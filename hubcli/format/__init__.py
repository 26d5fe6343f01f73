"""The contract client and registry share, torch-free: manifest and its JSON Schema (package data),
tensor spec, safetensors header reader, bundle rules, the error codes the registry sends
(`error_codes`), and one vocabulary per concept (`vocab`).

The registry imports only this package (plus `hubcli.errors`, `hubcli.fsutil` and the torch-free
signing code); an import-linter contract in pyproject.toml keeps torch out of it.
"""
