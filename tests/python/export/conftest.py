"""Fixtures of the export tests (ctest python/export): the tiny folders, made once per session, and the
jitembed.export module of this source tree (ahead of an installed copy that may predate it)."""
import pathlib
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
SOURCE = HERE.parents[2] / "python" / "jitembed"
sys.path.insert(0, str(HERE))

import jitembed  # noqa: E402

if str(SOURCE) not in jitembed.__path__:
    jitembed.__path__.insert(0, str(SOURCE))

import fixtures  # noqa: E402


@pytest.fixture(scope="session")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("folders")
    return {
        "vae": fixtures.make_vae(str(root)),
        "clip": fixtures.make_clip(str(root), "clip", projection=False, fast=True),
        "clip_projection": fixtures.make_clip(str(root), "clip_projection", projection=True, fast=False),
        "t5": fixtures.make_t5(str(root)),
        "siglip": fixtures.make_siglip(str(root)),
    }
