"""Running adapters on this machine: training, evaluation, attaching a bundle to a base, inference,
the adapter folder and its fine-tune layout, batching and precision."""
