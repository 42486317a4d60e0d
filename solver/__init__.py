"""clusterplan: which GPUs, how many, and how to run them."""

__version__ = "0.1.0"
