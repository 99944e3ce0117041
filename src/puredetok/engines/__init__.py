"""Engine plugins: puredetok inside vLLM and SGLang through their own plugin entry points."""
