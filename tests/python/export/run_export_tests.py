#!/usr/bin/env python3
"""Runs the export tests with pytest (ctest: python/export). Exit 77 (skip) when the jitembed module, pytest
or a package the export needs (torch, transformers, diffusers, tokenizers, sentencepiece, protobuf, Pillow)
is not installed in this interpreter (scripts/install-deps.sh python / torch install them)."""
import importlib.util
import os
import sys

# before anything loads an OpenMP runtime: one thread, the models are tiny and OpenMP's spinning threads on a busy
# 2-core machine made the exports 15x slower
os.environ.setdefault("OMP_NUM_THREADS", "1")
try:
    import jitembed._jitembed  # noqa: F401
except ImportError as e:
    print(f"SKIP: the jitembed Python module is not installed for {sys.executable} ({e}); "
          "run: bash scripts/install-deps.sh python", flush=True)
    sys.exit(77)
missing = [m for m in ("pytest", "torch", "transformers", "diffusers", "tokenizers", "sentencepiece", "google.protobuf",
                       "PIL") if importlib.util.find_spec(m.split(".")[0]) is None]
if missing:
    print(f"SKIP: {', '.join(missing)} not installed for {sys.executable} (bash scripts/install-deps.sh torch)", flush=True)
    sys.exit(77)
import pytest  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded: the folders are made by fixtures.py
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
here = os.path.dirname(os.path.abspath(__file__))
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "--rootdir", here, here] + sys.argv[1:]))
