"""The sample format from Python: the C++ conformance vectors read with their verdicts, records / batches /
shards / WebDataset / datasets round-tripped, shards written here read by C++ (jitembed-inspect), and
zero-copy views checked by address."""
import gc
import io
import json
import subprocess
import tarfile

import numpy as np
import pytest

import jitembed

KINDS = ["bytes", "image", "video", "text", "tensor", "json"]
CODECS = ["raw", "zstd", "jpeg", "video", "text"]
DTYPES = ["u8", "i8", "i16", "i32", "i64", "f16", "bf16", "f32", "f64", "bool"]


def limits_of(spec):
    lim = jitembed.DecodeLimits()
    for k, v in (spec or {}).items():
        setattr(lim, k, v)
    return lim


def check_record(rec, want):
    assert len(rec) == len(want["fields"])
    for f, w in zip(rec, want["fields"]):
        assert f.name == w["name"]
        assert f.kind == (KINDS[w["kind"]] if w["kind"] < len(KINDS) else "unknown")
        assert f.codec == (CODECS[w["codec"]] if w["codec"] < len(CODECS) else "unknown")
        assert f.dtype == (DTYPES[w["dtype"]] if w["dtype"] < len(DTYPES) else "invalid")
        assert list(f.shape) == w["shape"]
        if "decoded" in w:
            assert f.decode().tobytes().hex() == w["decoded"], f.name


def read_vector(path, kind, limits):
    """The manifest's procedure; returns what was read (raises the errc's exception on the first error)."""
    if kind == "record":
        rec = jitembed.RecordView.parse(path.read_bytes(), limits=limits)
        rec.verify()
        for f in rec:
            if f.codec in ("raw", "zstd", "text"):
                f.decode(limits=limits)
        return {"records": [rec]}
    if kind == "batch":
        batch = jitembed.BatchView.parse(path.read_bytes(), limits=limits)
        recs = [batch[i] for i in range(len(batch))]
    else:
        shard = jitembed.ShardReader.open(str(path), limits=limits)
        recs = [shard[i] for i in range(len(shard))]
        keys = shard.keys()
    for rec in recs:
        rec.verify()
        for f in rec:
            if f.codec in ("raw", "zstd", "text"):
                f.decode(limits=limits)
    out = {"records": recs}
    if kind == "shard":
        out["keys"] = keys
    return out


def test_conformance_vectors_written_by_cpp(vectors_dir):
    manifest = json.loads((vectors_dir / "manifest.json").read_text())
    seen = {"accept": 0, "reject": 0}
    for v in manifest["vectors"]:
        path = vectors_dir / v["file"]
        limits = limits_of(v.get("limits"))
        if v["expect"] == "accept":
            got = read_vector(path, v["type"], limits)
            want = v["content"]
            wrecs = want["records"] if "records" in want else [want]
            assert len(got["records"]) == len(wrecs), v["file"]
            for i, (rec, w) in enumerate(zip(got["records"], wrecs)):
                check_record(rec, w)
                if v["type"] == "shard":
                    assert got["keys"][i] == w["key"]
            seen["accept"] += 1
        else:
            with pytest.raises(jitembed.Error) as info:
                read_vector(path, v["type"], limits)
            assert info.value.errc == v["expect"], (v["file"], str(info.value))
            assert isinstance(info.value, jitembed.error_class(v["expect"]))
            seen["reject"] += 1
    assert seen["accept"] >= 10 and seen["reject"] >= 100


def make_record(jpeg_bytes):
    b = jitembed.RecordBuilder()
    latent = (np.arange(4 * 8 * 8, dtype=np.float32).reshape(4, 8, 8) / 7).astype(np.float16)
    ids = np.array([1, 300, 70000, -5], dtype=np.int64)
    b.add_image("image", jpeg_bytes)
    b.add_text("caption", "ein Kätzchen 🐱 auf der Matte " * 8)
    b.add_tensor("latent", latent)
    b.add_tensor("ids", ids, compression="zstd", shuffle=8)
    b.add_json("meta", '{"w": 2, "h": 3}', zstd=True)
    b.add_bytes("blob", b"\x01\x02\x03\x04\x05")
    return b, latent, ids


def test_record_round_trip(jpeg_bytes):
    b, latent, ids = make_record(jpeg_bytes)
    assert len(b) == 6
    data = b.finish()
    assert len(data) == b.encoded_size and len(data) % 64 == 0
    rec = jitembed.RecordView.parse(data)
    rec.verify()
    assert rec.keys() == ["image", "caption", "latent", "ids", "meta", "blob"]
    assert rec["caption"].kind == "text" and rec["caption"].codec == "text"  # compressed: saves a block
    d = rec.to_dict()
    assert d["caption"] == "ein Kätzchen 🐱 auf der Matte " * 8
    np.testing.assert_array_equal(d["latent"], latent)
    assert d["latent"].dtype == np.float16 and d["latent"].shape == (4, 8, 8)
    np.testing.assert_array_equal(d["ids"], ids)
    assert d["meta"] == '{"w": 2, "h": 3}'
    assert d["blob"].tobytes() == b"\x01\x02\x03\x04\x05"
    assert d["image"].tobytes() == jpeg_bytes
    img = rec["image"].decode_image()
    np.testing.assert_array_equal(img, jitembed.decode_jpeg(jpeg_bytes))
    assert "latent" in rec and "nope" not in rec
    with pytest.raises(jitembed.NotFoundError):
        rec["nope"]
    with pytest.raises(KeyError):
        rec["nope"]


def test_zero_copy_record_views(jpeg_bytes):
    b, latent, _ = make_record(jpeg_bytes)
    data = b.finish()
    base = jitembed._address(data)
    rec = jitembed.RecordView.parse(data)
    f = rec["latent"]
    arr = f.decode()
    assert not arr.flags.writeable  # it points into the caller's bytes
    # the array's first byte is the payload's byte inside `data`: no copy
    assert jitembed._address(arr) == base + (jitembed._address(f.payload()) - base)
    assert base <= jitembed._address(arr) < base + len(data)
    assert arr.__array_interface__["data"][0] == jitembed._address(arr)
    # numpy.from_dlpack shares the same memory
    assert jitembed._address(np.from_dlpack(arr)) == jitembed._address(arr)
    dl = f.dlpack()
    assert jitembed._address(np.from_dlpack(dl)) == jitembed._address(arr)
    # the view keeps the buffer alive after every other reference is gone
    del rec, f, b
    data_id = id(data)
    del data
    gc.collect()
    np.testing.assert_array_equal(arr, latent)
    assert data_id  # (the bytes object lives on through the array's owner)


def test_zero_copy_shard_views_keep_mapping_alive(tmp_path, jpeg_bytes):
    path = str(tmp_path / "z.jems")
    b, latent, _ = make_record(jpeg_bytes)
    with jitembed.ShardWriter.create(path) as w:
        w.append(b, key="k0")
        w.append(b.finish(), key="k1")
        assert len(w) == 2
    reader = jitembed.ShardReader.open(path)
    start, size = reader._address(), reader.nbytes
    arr = reader[1]["latent"].decode()
    raw = reader.record_bytes(0)
    assert start <= jitembed._address(arr) < start + size
    assert start <= jitembed._address(raw) < start + size
    assert not arr.flags.writeable and not raw.flags.writeable
    with pytest.raises(ValueError):
        arr[0, 0, 0] = 1  # the mapping is read-only: numpy refuses instead of crashing
    del reader
    gc.collect()
    np.testing.assert_array_equal(arr, latent)  # the mapping lives while the array does


def test_torch_from_dlpack_shares_memory(jpeg_bytes):
    torch = pytest.importorskip("torch")
    b, latent, _ = make_record(jpeg_bytes)
    rec = jitembed.RecordView.parse(b.finish())
    t = torch.from_dlpack(rec["latent"].dlpack())
    assert t.data_ptr() == jitembed._address(rec["latent"].decode())
    assert t.dtype == torch.float16 and tuple(t.shape) == latent.shape


def test_bf16_through_dlpack():
    bits = np.array([0x3F80, 0x4000, 0xC040], dtype=np.uint16)  # bf16 1.0, 2.0, -3.0
    b = jitembed.RecordBuilder()
    b.add_encoded("x", "tensor", "raw", bits.tobytes(), dtype="bf16", shape=(3,))
    rec = jitembed.RecordView.parse(b.finish())
    assert rec["x"].dtype == "bf16"
    a = rec["x"].decode()  # numpy has no bfloat16: the bits as uint16, same memory
    assert a.dtype == np.uint16
    np.testing.assert_array_equal(a, bits)
    dl = rec["x"].dlpack()  # a DLPack array that keeps bf16 (for torch.from_dlpack)
    assert dl.__dlpack_device__() == (1, 0)
    try:
        import torch
    except ImportError:
        return
    t = torch.from_dlpack(dl)
    assert t.dtype == torch.bfloat16 and t.tolist() == [1.0, 2.0, -3.0]


def test_batches(jpeg_bytes):
    b1, _, _ = make_record(jpeg_bytes)
    b2 = jitembed.RecordBuilder()
    b2.add_text("caption", "second")
    bb = jitembed.BatchBuilder()
    bb.append(b1)
    bb.append(b2.finish())
    batch = jitembed.BatchView.parse(bb.finish())
    assert len(batch) == 2
    assert batch[1].to_dict() == {"caption": "second"}
    assert batch[0]["caption"].text().startswith("ein Kätzchen")


def test_python_shard_read_by_cpp_inspect(tmp_path, inspect_tool, jpeg_bytes):
    path = tmp_path / "py.jems"
    latent = np.linspace(-1, 1, 24, dtype=np.float32).reshape(2, 3, 4)
    with jitembed.ShardWriter.create(str(path)) as w:
        for i in range(3):
            b = jitembed.RecordBuilder()
            b.add_text("caption", f"caption {i}")
            b.add_tensor("latent", latent + i, compression="zstd", shuffle=4)
            b.add_image("image", jpeg_bytes)
            w.append(b, key=f"sample/{i}")
    out = subprocess.run([inspect_tool, str(path), "--decode"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert info["type"] == "jitembed-shard" and info["records"] == 3
    for i, r in enumerate(info["record_list"]):
        assert r["key"] == f"sample/{i}"
        fields = {f["name"]: f for f in r["fields"]}
        assert fields["latent"]["dtype"] == "f32" and fields["latent"]["shape"] == [2, 3, 4]
        assert fields["latent"]["decoded_xxh3"] == jitembed.xxh3_128((latent + i).tobytes())
        assert fields["caption"]["decoded_xxh3"] == jitembed.xxh3_128(f"caption {i}".encode())
        assert fields["image"]["kind"] == "image"
    # and C++ rejects a corrupted copy with the same errc Python reports
    bad = bytearray(path.read_bytes())
    bad[-8] ^= 0xFF  # trailer checksum
    (tmp_path / "bad.jems").write_bytes(bytes(bad))
    out = subprocess.run([inspect_tool, str(tmp_path / "bad.jems")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "checksum_mismatch" in out.stderr
    with pytest.raises(jitembed.ChecksumMismatchError):
        jitembed.ShardReader.open(str(tmp_path / "bad.jems"))


def write_tar(path, samples):
    with tarfile.open(path, "w") as tar:
        for key, members in samples:
            for ext, data in members.items():
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def npy_bytes(a):
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def test_webdataset_and_dataset(tmp_path, jpeg_bytes):
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)
    tar = str(tmp_path / "wds.tar")
    write_tar(tar, [(f"s{i:03d}", {"jpg": jpeg_bytes, "txt": f"text {i}".encode(), "npy": npy_bytes(arr + i)}) for i in range(4)])
    wds = jitembed.WebDatasetReader.open(tar)
    assert len(wds) == 4
    s = wds[2]
    assert s["__key__"] == "s002" and s["txt"] == "text 2"
    np.testing.assert_array_equal(s["npy"], arr + 2)
    assert not s["npy"].flags.writeable
    assert s["jpg"].tobytes() == jpeg_bytes
    rec = jitembed.RecordView.parse(wds.to_record(1).finish())
    assert rec["txt"].text() == "text 1"
    np.testing.assert_array_equal(rec["npy"].decode(), arr + 1)

    shard = str(tmp_path / "d.jems")
    with jitembed.ShardWriter.create(shard) as w:
        for i in range(3):
            b = jitembed.RecordBuilder()
            b.add_text("caption", f"shard {i}")
            w.append(b, key=str(i))
    ds = jitembed.Dataset.open([shard, tar])
    assert len(ds) == 7
    ids = [ds.id(i) for i in range(len(ds))]
    assert ids[:3] == ["d.jems#0", "d.jems#1", "d.jems#2"] and ids[3] == "wds.tar#s000"
    assert ds[1].to_dict() == {"caption": "shard 1"}
    assert ds[1].record is not None and ds[4].record is None
    d = ds[4].to_dict()
    assert d["txt"] == "text 1"
    np.testing.assert_array_equal(d["npy"], arr + 1)
    with pytest.raises(jitembed.NotFoundError):
        ds[7]
    with pytest.raises(jitembed.NotFoundError):
        jitembed.Dataset.open(str(tmp_path / "missing.jems"))
    with pytest.raises(jitembed.IoError) as info:
        jitembed.ShardReader.open(str(tmp_path / "missing.jems"))
    assert isinstance(info.value, OSError) and info.value.code == 16
