"""The README's Python snippet, run on real data, so the README stays true."""
import pathlib
import re

import numpy as np

import jitembed

README = pathlib.Path(__file__).resolve().parents[3] / "README.md"


def python_blocks(text, section):
    part = text[text.index(section):]
    part = part[: part.index("\n## ", 1)]
    return re.findall(r"```python\n(.*?)```", part, flags=re.S)


def test_readme_python_section(tmp_path, monkeypatch, jpeg_bytes):
    blocks = python_blocks(README.read_text(encoding="utf-8"), "## Python")
    assert len(blocks) == 1
    monkeypatch.chdir(tmp_path)
    with jitembed.ShardWriter.create("train-000.jems") as w:
        for i in range(5):
            b = jitembed.RecordBuilder()
            b.add_text("caption", f"caption {i}")
            w.append(b, key=str(i))
    env = {"jpeg_bytes": jpeg_bytes, "latent": np.ones((4, 8, 8), np.float16)}
    exec(compile(blocks[0], "README.md", "exec"), env)
    assert env["pooled"].shape[0] == 1 and env["future"].result(timeout=30) is not None
    assert env["step"]["caption"].shape[0] == 5
