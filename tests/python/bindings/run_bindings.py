#!/usr/bin/env python3
"""Runs the binding tests with pytest (ctest: python/bindings). Exit 77 (skip) only when the jitembed module
is not installed in this interpreter: scripts/install-deps.sh python (part of `test`) installs it."""
import os
import sys

try:
    import jitembed._jitembed  # noqa: F401
except ImportError as e:
    print(f"SKIP: the jitembed Python module is not installed for {sys.executable} ({e}); "
          "run: bash scripts/install-deps.sh python", flush=True)
    sys.exit(77)
try:
    import pytest
except ImportError:
    print(f"SKIP: pytest is not installed for {sys.executable}", flush=True)
    sys.exit(77)

here = os.path.dirname(os.path.abspath(__file__))
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "--rootdir", here, here] + sys.argv[1:]))
