#!/usr/bin/env python3
"""The jitembed Python bindings against the usual Python ways, side by side in one run:

* a multimodal sample (JPEG bytes, a caption, a float16 latent [4, 64, 64], int64 ids and int32 tokens) encoded
  and decoded with every field materialized (numpy arrays / bytes / str): jitembed records (RecordBuilder,
  RecordView.to_dict) vs pickle protocol 5 vs msgpack-numpy (goal: jitembed >= 3x faster than both). Each
  encoder writes one contiguous bytes object (one copy of the payloads); jitembed's decode is zero-copy and
  verifies the payload checksums (also shown without the check, as pickle and msgpack do none);
* JPEG decode to a numpy array: jitembed.decode_jpeg vs Pillow.

Prints a table, then one JSON object per result line (the house format of benchmarks/). Ratios are
other / jitembed (higher: jitembed faster), each pair timed alternately (best of N) so drift hits both.

    .venv/bin/python benchmarks/python/bench_bindings.py [--rounds 30]
"""
import argparse
import io
import json
import pickle
import time

import numpy as np

import jitembed


def best_seconds(fn, inner):
    t0 = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - t0) / inner


def side_by_side(rounds, inner, a, b):
    a()
    b()
    ba = bb = float("inf")
    for _ in range(rounds):
        ba = min(ba, best_seconds(a, inner))
        bb = min(bb, best_seconds(b, inner))
    return ba, bb


def make_sample():
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:512, 0:512]
    img = np.stack([(x // 2) % 256, (y // 2) % 256, ((x + y) // 4) % 256], -1) + rng.integers(0, 24, (512, 512, 3))
    jpeg = jitembed.encode_jpeg(np.clip(img, 0, 255).astype(np.uint8), quality=90)
    return {
        "image": jpeg,
        "caption": "A red bicycle leaning against a brick wall in the late afternoon sun, long shadows on the pavement.",
        "latent": rng.standard_normal((4, 64, 64)).astype(np.float16),
        "ids": np.array([123456789, 512, 512], dtype=np.int64),
        "tokens": rng.integers(0, 49408, 77).astype(np.int32),
    }


def jitembed_encode(s):
    b = jitembed.RecordBuilder()
    b.add_image("image", s["image"])
    b.add_text("caption", s["caption"], level=0)  # stored as is, like pickle and msgpack store it
    b.add_tensor("latent", s["latent"])
    b.add_tensor("ids", s["ids"])
    b.add_tensor("tokens", s["tokens"])
    return b.finish()


def jitembed_decode(data):
    return jitembed.RecordView.parse(data).to_dict()  # payload checksums verified, every field materialized


def jitembed_decode_unverified(data):
    return jitembed.RecordView.parse(data).to_dict(verify=False)  # no integrity check, like pickle / msgpack


def pickle_encode(s):
    return pickle.dumps(s, protocol=5)


def pickle_decode(data):
    return pickle.loads(data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    import msgpack
    import msgpack_numpy
    from PIL import Image

    s = make_sample()
    enc_j, enc_p = jitembed_encode(s), pickle_encode(s)
    enc_m = msgpack.packb(s, default=msgpack_numpy.encode)

    def mp_encode(s):
        return msgpack.packb(s, default=msgpack_numpy.encode)

    def mp_decode(data):
        return msgpack.unpackb(data, object_hook=msgpack_numpy.decode)

    # every encoder's output decodes to the sample
    for dec, data in ((jitembed_decode, enc_j), (pickle_decode, enc_p), (mp_decode, enc_m)):
        d = dec(data)
        assert bytes(d["image"]) == s["image"] and d["caption"] == s["caption"]
        for k in ("latent", "ids", "tokens"):
            assert np.array_equal(d[k], s[k]) and d[k].dtype == s[k].dtype

    inner, rows = 200, []

    def add(bench, metric, value, unit, target=0.0, **extra):
        j = {"bench": bench, metric: value, "unit": unit}
        if target:
            j["target"], j["meets_target"] = target, value >= target
        j.update(extra)
        rows.append((bench, metric, value, unit, target, j))

    times = {}
    for name, enc, dec, data in (("pickle5", pickle_encode, pickle_decode, enc_p),
                                 ("msgpack_numpy", mp_encode, mp_decode, enc_m)):
        tj_e, to_e = side_by_side(args.rounds, inner, lambda: jitembed_encode(s), lambda: enc(s))
        tj_d, to_d = side_by_side(args.rounds, inner, lambda: jitembed_decode(enc_j), lambda: dec(data))
        times[name] = (tj_e, to_e, tj_d, to_d)
        add(f"python/sample_encode_vs_{name}", "speedup", to_e / tj_e, "x", 0.0,
            jitembed_us=tj_e * 1e6, other_us=to_e * 1e6)
        add(f"python/sample_decode_vs_{name}", "speedup", to_d / tj_d, "x", 0.0,
            jitembed_us=tj_d * 1e6, other_us=to_d * 1e6)
        tj_u, to_u = side_by_side(args.rounds, inner, lambda: jitembed_decode_unverified(enc_j), lambda: dec(data))
        add(f"python/sample_decode_unverified_vs_{name}", "speedup", to_u / tj_u, "x", 0.0,
            jitembed_us=tj_u * 1e6, other_us=to_u * 1e6)
        add(f"python/sample_roundtrip_vs_{name}", "speedup", (to_e + to_d) / (tj_e + tj_d), "x", 3.0,
            jitembed_us=(tj_e + tj_d) * 1e6, other_us=(to_e + to_d) * 1e6,
            encoded_bytes={"jitembed": len(enc_j), name: len(data)})

    jpeg = s["image"]

    def pil_decode():
        return np.asarray(Image.open(io.BytesIO(jpeg)).convert("RGB"))

    assert np.abs(pil_decode().astype(int) - jitembed.decode_jpeg(jpeg).astype(int)).max() <= 1
    tj, tp = side_by_side(max(5, args.rounds // 3), 20, lambda: jitembed.decode_jpeg(jpeg), pil_decode)
    add("python/jpeg_decode_512x512_vs_pillow", "speedup", tp / tj, "x", 0.0, jitembed_ms=tj * 1e3, pillow_ms=tp * 1e3)

    print(f"sample: jpeg {len(jpeg)} B, caption {len(s['caption'])} chars, latent f16{list(s['latent'].shape)}, "
          f"ids i64[3], tokens i32[77]; encoded: jitembed {len(enc_j)} B, pickle5 {len(enc_p)} B, msgpack-numpy {len(enc_m)} B")
    for name, (tj_e, to_e, tj_d, to_d) in times.items():
        print(f"  us per sample  jitembed encode {tj_e * 1e6:7.2f} decode {tj_d * 1e6:7.2f} | "
              f"{name} encode {to_e * 1e6:7.2f} decode {to_d * 1e6:7.2f}")
    print(f"{'bench':44} {'metric':22} {'value':>14} {'unit':10} target")
    for bench, metric, value, unit, target, _ in rows:
        tgt = f">= {target:g}  {'ok' if value >= target else 'MISSED'}" if target else ""
        print(f"{bench:44} {metric:22} {value:14.4g} {unit:10} {tgt}")
    print()
    for *_, j in rows:
        print(json.dumps(j))


if __name__ == "__main__":
    main()
