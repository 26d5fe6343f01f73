"""`hub-registry backup` and `restore`: the database and the blobs it names, as one tar file.

    create.write_backup(engine, storage, Path("registry.tar"))   # a consistent snapshot
    restore.restore(engine, storage, Path("registry.tar"))       # into an empty deployment

The archive's layout and value encoding are in `archive`.
"""
