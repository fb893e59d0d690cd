#!/usr/bin/env python3
"""ctest entry for the interop suite (label "python"): checks what the tests need, then runs pytest.

  run_interop.py --need tritonclient|perf_analyzer --server PATH --reference PATH --venv DIR --work DIR [-- pytest args]

Exit 77 (ctest: skipped) with a message when tritonclient / numpy / pytest are not importable (--need grpc:
tritonclient.grpc, and a jitembed-server built with --grpc-port), when
--need perf_analyzer and no runnable perf_analyzer is found, or when jitembed-server is not built.
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def skip(msg):
    print(f"SKIP: {msg}")
    sys.exit(77)


def main():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser()
    ap.add_argument("--need", choices=["tritonclient", "perf_analyzer", "grpc"], required=True)
    ap.add_argument("--tests", default="test_interop.py", help="the pytest file (next to this script)")
    ap.add_argument("--server", required=True)
    ap.add_argument("--reference", required=True)
    ap.add_argument("--venv", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args(argv)

    try:
        import numpy  # noqa: F401
        import pytest
        import tritonclient.http  # noqa: F401
    except ImportError as e:
        skip(f"tritonclient[http] / numpy / pytest not importable ({e}); run scripts/install-deps.sh to create .venv")
    if not os.access(a.server, os.X_OK):
        skip(f"jitembed-server not built at {a.server}")
    if not os.access(a.reference, os.X_OK):
        skip(f"reference_embed not built at {a.reference}")

    if a.need == "grpc":
        try:
            import tritonclient.grpc  # noqa: F401
        except ImportError as e:
            skip(f"tritonclient.grpc not importable ({e}); run scripts/install-deps.sh")
        import subprocess
        if subprocess.run([a.server, "--help"], capture_output=True, text=True).stdout.find("--grpc-port") < 0:
            skip("jitembed-server was built without the grpc component (JITEMBED_WITH_GRPC, libgrpc++-dev)")

    import interop_util
    pa = interop_util.find_perf_analyzer(a.venv)
    if a.need == "perf_analyzer" and pa is None:
        skip("perf_analyzer not found or not runnable (PERF_ANALYZER, <venv>/bin/perf_analyzer, "
             "<venv>/perf_analyzer/bin/perf_analyzer); run scripts/install-deps.sh")

    os.environ["JITEMBED_SERVER"] = a.server
    os.environ["JITEMBED_REFERENCE"] = a.reference
    work = os.path.join(a.work, a.need)  # one folder per ctest, so the two can run in parallel
    os.environ["JITEMBED_INTEROP_WORK"] = work
    os.environ["JITEMBED_VENV"] = a.venv
    os.makedirs(work, exist_ok=True)
    rc = pytest.main([os.path.join(HERE, a.tests), "-q", "-p", "no:cacheprovider",
                      "--rootdir", HERE] + extra)
    sys.exit(int(rc))


if __name__ == "__main__":
    main()
