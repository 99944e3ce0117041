"""Serving: the batched managers, their request options and messages, EOS ids, tokenizer loading."""
