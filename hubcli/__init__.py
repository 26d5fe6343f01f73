"""adapter hub: Houlsby bottleneck adapters on a frozen BERT, signed and shared.

Importing this package is cheap on purpose: nothing here pulls in torch or transformers,
so the registry server and fast CLI paths can use the torch-free modules.
"""

__version__ = "0.1.0"
