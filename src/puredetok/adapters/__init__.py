"""Adapters around the pure core: tokenizer loading, managers, the worker, the wire format."""
