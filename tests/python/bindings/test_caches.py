"""Caches from Python: memory, LMDB (a tmp dir), Redis (a throwaway redis-server), tiered; values come back
as arrays sharing the store's buffer."""
import numpy as np
import pytest

import jitembed


def value():
    return {"latent": np.linspace(-2, 2, 4 * 8 * 8, dtype=np.float32).reshape(4, 8, 8).astype(np.float16),
            "pooled": np.arange(16, dtype=np.float32)}


def check_round_trip(cache, compression="raw"):
    v = value()
    key = jitembed.cache_key("image-latent", "v1", "bucket=256", b"jpeg bytes")
    assert isinstance(key, bytes) and len(key) == 16
    assert cache.get(key) is None and not cache.contains(key)
    assert cache.put(key, v, compression=compression)
    assert cache.contains(key) and key in cache
    got = cache.get(key)
    assert set(got) == {"latent", "pooled"}
    for k in v:
        np.testing.assert_array_equal(got[k], v[k])
        assert got[k].dtype == v[k].dtype and got[k].shape == v[k].shape
    raw = cache.get_bytes(key)
    rec = jitembed.RecordView.parse(raw)  # a value is one record of tensor fields
    np.testing.assert_array_equal(rec["pooled"].decode(), v["pooled"])
    other = jitembed.cache_key("image-latent", "v2", "bucket=256", b"jpeg bytes")
    assert other != key
    assert cache.put_bytes(other, raw)
    np.testing.assert_array_equal(cache.get(other)["latent"], v["latent"])
    assert cache.erase(other) and cache.get(other) is None
    st = cache.stats()
    assert st["hits"] >= 2 and st["misses"] >= 2 and st["puts"] >= 2
    return key, got


def test_cache_key_forms():
    k = jitembed.cache_key("m", "1", "p", b"content")
    assert k == jitembed.cache_key("m", "1", "p", bytearray(b"content"))
    assert k != jitembed.cache_key("m", "1", "p", b"content2")
    c = jitembed.MemoryCache(1 << 20)
    c.put(k, {"x": np.ones(3, np.float32)})
    # the 32-hex-digit form (high word first, as cache_key::to_hex prints it) names the same entry
    hex_key = k[8:][::-1].hex() + k[:8][::-1].hex()
    np.testing.assert_array_equal(c.get(hex_key)["x"], np.ones(3, np.float32))
    with pytest.raises(jitembed.InvalidArgumentError):
        c.get(b"short")


def test_memory_cache_zero_copy():
    c = jitembed.MemoryCache(byte_budget=1 << 20, shards=2)
    key, got = check_round_trip(c)
    again = c.get(key)
    # raw values are views into the stored buffer: two gets see the same memory, read-only
    assert jitembed._address(again["latent"]) == jitembed._address(got["latent"])
    assert not again["latent"].flags.writeable
    assert c.stats()["entries"] >= 1


def test_memory_cache_zstd_values():
    check_round_trip(jitembed.MemoryCache(1 << 20), compression="zstd")


def test_lmdb_cache(tmp_path):
    path = str(tmp_path / "lmdb")
    c = jitembed.LmdbCache(path, sync=False)
    key, got = check_round_trip(c)
    del c
    reopened = jitembed.LmdbCache(path)
    np.testing.assert_array_equal(reopened.get(key)["pooled"], value()["pooled"])


def test_redis_cache(redis_server):
    c = jitembed.RedisCache(port=redis_server, prefix="pytest:")
    check_round_trip(c, compression="zstd")


def test_redis_unreachable_is_io_error():
    import socket
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(jitembed.IoError):
        jitembed.RedisCache(port=port, connect_timeout_ms=200)


def test_tiered_cache_promotes(tmp_path):
    mem = jitembed.MemoryCache(1 << 20)
    disk = jitembed.LmdbCache(str(tmp_path / "tier"), sync=False)
    key = jitembed.cache_key("m", "1", "", b"x")
    assert disk.put(key, value())  # only the slow tier has it
    tiered = jitembed.TieredCache([mem, disk])
    assert mem.get(key) is None
    np.testing.assert_array_equal(tiered.get(key)["pooled"], value()["pooled"])
    assert mem.get(key) is not None  # promoted into the memory tier (the same store as `mem`)
    assert len(tiered.tier_stats()) == 2
