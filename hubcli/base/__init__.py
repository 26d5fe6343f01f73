"""The frozen base model: where one is (`ref`: `resolve_base` for what a user typed,
`known_bases` for those on this machine, `find_base` by content hash), its content hash
(`hashing`), and loading it onto a device (`load`)."""
