"""Benchmarks inside the engines' own paths (vLLM's OutputProcessor, SGLang's detokenizer process),
run in each engine's environment.
"""
