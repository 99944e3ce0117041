"""vLLM's own code with puredetok plugged in, run in vLLM's pinned environment
(``python3 tasks.py test-engines vllm``): hypothesis profiles ``dev`` and ``ci`` (bounded, so the
whole CI stays within its time), the repository's test helpers on the path, and vLLM's plugins
loaded the way vLLM loads them."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# vLLM settles its platform at its first import (a CUDA wheel on a machine without a GPU finds
# none); its render server (test_derender.py) needs one: the CPU's, as on the CI machine.
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "dev",
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "ci",
    max_examples=40,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
