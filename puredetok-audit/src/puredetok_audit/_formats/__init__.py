"""The logs the audit reads, one module per source: vLLM's server responses and streams, SGLang's
``/generate`` outputs and streams, trainers' rollout tables, puredetok's traces; each read into
the requests the audit compares.
"""
