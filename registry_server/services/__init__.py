"""The registry's service layer: plain functions over a SQLAlchemy `Session`, shared by the
HTTP blueprints, the CLI and the web UI. Functions that change data commit their own
transaction; errors are `registry_server.errors` classes (each knows its HTTP status).

- accounts: users, organisations, memberships, API tokens, signing public keys
- repos: adapters, visibility, revisions (`main`, versions, commit ids), files
- commits: the push policy (bundle check, signature, immutable versions), atomically
- versions: yank, un-yank, delete, download counting
- search: filtered/sorted/paginated search, adapters compatible with a base
- maintenance: garbage collection of unreferenced blobs
"""
