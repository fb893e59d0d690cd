"""The installed package: type stubs and py.typed ship next to the extension, and the stub is valid Python."""
import ast
import pathlib

import jitembed


def test_stubs_ship_with_the_module():
    pkg = pathlib.Path(jitembed.__file__).parent
    assert (pkg / "py.typed").exists()
    stub = (pkg / "_jitembed.pyi").read_text(encoding="utf-8")
    ast.parse(stub)
    for needle in ("class Server", "def embed_async", "class Loader", "class RecordBuilder", "class LmdbCache",
                   "class TimeoutError(Error, builtins.TimeoutError)", "def decode_jpeg"):
        assert needle in stub, needle
    assert jitembed.__version__ == "0.1.0"
