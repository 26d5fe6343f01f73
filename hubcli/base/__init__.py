"""The frozen base model: what a user types for a base (`ref`), its content hash (`hashing`),
and loading it onto a device (`load`)."""
