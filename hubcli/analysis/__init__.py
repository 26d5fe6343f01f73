"""Seeing what adapters do: layer ablations, AdapterDrop, sweeps, and their plots."""
