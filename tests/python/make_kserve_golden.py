#!/usr/bin/env python3
"""Golden KServe v2 bodies for jitembed's protocol tests, made and parsed by tritonclient itself.

  make_kserve_golden.py write <dir>   writes the request goldens (kserve_req_*.bin + kserve_golden.json)
  make_kserve_golden.py check <dir>   regenerates the requests and compares them with the committed bytes,
                                      and parses the committed response goldens (written by jitembed's
                                      encoder, see tests/kserve/test_golden.cpp) back to the expected arrays.
Exit 77 (ctest: skipped) when tritonclient is not importable.
"""
import json
import os
import sys

try:
    import ml_dtypes
    import numpy as np
    import tritonclient.http as httpclient
except ImportError as e:  # pragma: no cover
    print(f"SKIP: tritonclient[http]/numpy not importable ({e}); run scripts/install-deps.sh to create .venv")
    sys.exit(77)

BF16 = ml_dtypes.bfloat16


def inputs(json_form):
    """The tensors every request golden carries; BF16 is binary in both forms (JSON cannot carry it)."""
    binary = not json_form
    t = []
    x = httpclient.InferInput("pixels", [2, 3], "FP32")
    x.set_data_from_numpy(np.array([[0.5, -1.25, 3.0], [1e-7, 0.1, 65504.0]], dtype=np.float32), binary_data=binary)
    t.append(x)
    x = httpclient.InferInput("ids", [3], "INT64")
    x.set_data_from_numpy(np.array([1, -2, 9007199254740993], dtype=np.int64), binary_data=binary)
    t.append(x)
    x = httpclient.InferInput("samples", [2, 1], "BYTES")
    if json_form:  # JSON carries BYTES as UTF-8 strings
        x.set_data_from_numpy(np.array([["héllo ☃ \"q\""], ["line\nnext"]], dtype=np.object_), binary_data=False)
    else:
        x.set_data_from_numpy(np.array([[b"hello"], [b"\x00\xffbin"]], dtype=np.object_), binary_data=True)
    t.append(x)
    x = httpclient.InferInput("latent", [2, 2], "BF16")
    x.set_data_from_numpy(np.array([[1.0, -2.5], [0.1, 3.140625]], dtype=BF16), binary_data=True)
    t.append(x)
    x = httpclient.InferInput("mask", [4], "BOOL")
    x.set_data_from_numpy(np.array([True, False, True, True]), binary_data=binary)
    t.append(x)
    return t


def requests():
    """name -> (body bytes, json_size or None)."""
    out = {}
    outs = [httpclient.InferRequestedOutput("embedding", binary_data=True),
            httpclient.InferRequestedOutput("scores", binary_data=False)]
    out["req_binary"] = httpclient.InferenceServerClient.generate_request_body(
        inputs(False), outputs=outs, request_id="req-1", priority=2, timeout=5000,
        parameters={"jitembed_cache": "lmdb", "width": 512})
    out["req_json"] = httpclient.InferenceServerClient.generate_request_body(
        inputs(True), outputs=[httpclient.InferRequestedOutput("embedding", binary_data=False)], request_id="req-2")
    # No requested outputs: tritonclient asks for binary_data_output; FP16 and UINT8 binary.
    h = httpclient.InferInput("half", [3], "FP16")
    h.set_data_from_numpy(np.array([1.0, -0.5, 65504.0], dtype=np.float16))
    u = httpclient.InferInput("image", [2, 2, 1], "UINT8")
    u.set_data_from_numpy(np.array([0, 7, 128, 255], dtype=np.uint8).reshape(2, 2, 1))
    out["req_no_outputs"] = httpclient.InferenceServerClient.generate_request_body([h, u])
    # JSON only: no binary section, no Inference-Header-Content-Length.
    a = httpclient.InferInput("scale", [2], "FP64")
    a.set_data_from_numpy(np.array([0.25, -1e300]), binary_data=False)
    b = httpclient.InferInput("count", [1, 2], "INT32")
    b.set_data_from_numpy(np.array([[-7, 2147483647]], dtype=np.int32), binary_data=False)
    c = httpclient.InferInput("ports", [2], "UINT16")
    c.set_data_from_numpy(np.array([80, 65535], dtype=np.uint16), binary_data=False)
    out["req_json_only"] = httpclient.InferenceServerClient.generate_request_body(
        [a, b, c], outputs=[httpclient.InferRequestedOutput("out", binary_data=False, class_count=3)], request_id="7")
    return out


# What tests/kserve/test_golden.cpp encodes into the response goldens.
EXPECTED_RESPONSES = {
    "resp_binary": {
        "embedding": np.array([[0.5, -1.0, 2.25, 1e-3], [4.0, 0.0, -0.125, 1e6]], dtype=np.float32),
        "half": np.array([1.5, -2.0], dtype=np.float16),
        "latent": np.array([[1.0, -2.5]], dtype=BF16),
        "captions": np.array([b"a cat", b"", b"\x00\x01"], dtype=np.object_),
        "scores": np.array([[3, -4]], dtype=np.int64),
    },
    "resp_json": {
        "embedding": np.array([0.5, 0.1], dtype=np.float32),
        "flags": np.array([[True, False]]),
        "captions": np.array(["café"], dtype=np.object_),  # JSON BYTES parse to str
    },
}


def write(d):
    manifest = {}
    for name, (body, json_size) in requests().items():
        with open(os.path.join(d, f"kserve_{name}.bin"), "wb") as f:
            f.write(body)
        manifest[name] = {"header_length": json_size, "body_size": len(body)}
    with open(os.path.join(d, "kserve_golden.json"), "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
        f.write("\n")
    print(f"wrote {len(manifest)} request goldens to {d}")


def check(d):
    failures = 0
    with open(os.path.join(d, "kserve_golden.json")) as f:
        manifest = json.load(f)
    for name, (body, json_size) in requests().items():
        with open(os.path.join(d, f"kserve_{name}.bin"), "rb") as f:
            committed = f.read()
        if committed != body or manifest[name]["header_length"] != json_size:
            print(f"FAIL {name}: tritonclient now produces different bytes ({len(body)} vs {len(committed)})")
            failures += 1
        else:
            print(f"ok   {name}: {len(body)} bytes, header_length {json_size}")
    for name, expected in EXPECTED_RESPONSES.items():
        path = os.path.join(d, f"kserve_{name}.bin")
        with open(path, "rb") as f:
            body = f.read()
        # The header is the leading JSON value; binary data (if any) follows it.
        _, end = json.JSONDecoder().raw_decode(body.decode("latin-1"))
        header_length = end if end < len(body) else None
        result = httpclient.InferResult.from_response_body(body, False, header_length)
        for out_name, want in expected.items():
            got = result.as_numpy(out_name)
            if got is None or got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(got, want):
                print(f"FAIL {name}/{out_name}: tritonclient parsed {got!r}, expected {want!r}")
                failures += 1
        if failures == 0:
            print(f"ok   {name}: tritonclient parsed {len(expected)} outputs")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("write", "check"):
        print(__doc__)
        sys.exit(2)
    if sys.argv[1] == "write":
        write(sys.argv[2])
    else:
        sys.exit(check(sys.argv[2]))
