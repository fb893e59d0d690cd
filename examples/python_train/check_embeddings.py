#!/usr/bin/env python3
"""Are the served embeddings bitwise equal to the in-process ones? jitembed-server (started here on a free
loopback port, OMP_NUM_THREADS=1: one LibTorch intra-op thread) and this process (torch.set_num_threads(1),
torch.jit.load of the same model.pt, torchvision / sentencepiece preprocessing as train.py's inline mode) embed
the same samples; each request is sent alone (so the server's dynamic batcher sees only its rows) and compared with
the in-process encoder run on the same rows as one batch, then on the same rows in other batch sizes.

    .venv/bin/python examples/python_train/check_embeddings.py [--data DIR] [--images 32] [--batch 1,4,8]

Prints, per model and request size, the rows compared, how many are bitwise equal and the max abs difference,
then one JSON object per line.
"""
import argparse
import json
import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
warnings.filterwarnings("ignore", message=".*torch.jit.load.*is deprecated.*")

import torch  # noqa: E402

import data as data_gen  # noqa: E402
import encoders  # noqa: E402
import sources  # noqa: E402
from train import ROOT, ServerProcess, find_server  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="")
    ap.add_argument("--images", type=int, default=32)
    ap.add_argument("--batch", default="1,4,8", help="request sizes (rows per request)")
    ap.add_argument("--model-repository", default=os.path.join(ROOT, "build", "release", "model_repository"))
    ap.add_argument("--server-bin", default="")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "python_train_out"))
    o = ap.parse_args()
    import jitembed
    torch.set_num_threads(1)
    if not o.data:
        o.data = os.path.join(o.out, f"data-{o.images}i-seed1")
        data_gen.ensure_data(o.data, images=o.images, seed=1)
    ds = jitembed.Dataset.open(o.data)
    raw = [sources.raw_inputs(ds[i], ("image", "text")) for i in range(len(ds))]
    local = {"vae_encoder": (encoders.ImageEncoder(os.path.join(o.model_repository, "vae_encoder")), "image", "image"),
             "t5_encoder": (encoders.TextEncoder(os.path.join(o.model_repository, "t5_encoder")), "text", "text")}
    sizes = [int(b) for b in o.batch.split(",")]
    server = ServerProcess(find_server(o.server_bin), ["--model-repository", o.model_repository], threads=1)
    results = []
    try:
        client = jitembed.Client(endpoints=[server.url])
        for model, (enc, field, kind) in local.items():
            for b in sizes:
                rows = equal = 0
                max_abs = max_abs_other = 0.0
                for lo in range(0, len(raw), b):
                    chunk = raw[lo:lo + b]
                    values = [r[field] for r in chunk]
                    payload = [bytes(v) if kind == "image" else v.encode() for v in values]
                    served = torch.from_numpy(client.embed(model, payload, input=kind)["OUTPUT__0"].copy())
                    mine = enc(values)
                    d = (served - mine).abs().flatten(1).amax(1)
                    rows += len(chunk)
                    equal += int((d == 0).sum())
                    max_abs = max(max_abs, d.max().item())
                    # the same rows in-process one by one (another batch composition)
                    if b > 1:
                        ones = torch.cat([enc([v]) for v in values])
                        max_abs_other = max(max_abs_other, (served - ones).abs().max().item())
                results.append({"bench": "python_train_check_embeddings", "model": model, "rows_per_request": b,
                                "rows": rows, "bitwise_equal_rows": equal, "max_abs": max_abs,
                                "max_abs_vs_batch1_in_process": max_abs_other if b > 1 else None})
        client.close()
    finally:
        server.stop()
    print(f"{'model':12} {'rows/request':>12} {'rows':>5} {'bitwise equal':>14} {'max abs':>10} {'vs batch 1 in-process':>22}")
    for r in results:
        other = "" if r["max_abs_vs_batch1_in_process"] is None else f"{r['max_abs_vs_batch1_in_process']:.3g}"
        print(f"{r['model']:12} {r['rows_per_request']:12d} {r['rows']:5d} {r['bitwise_equal_rows']:14d} {r['max_abs']:10.3g} {other:>22}")
    print()
    for r in results:
        print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
