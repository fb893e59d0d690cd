"""A served CLIP text encoder vs eager transformers, strings in, side by side in one process on the same threads.

Arms (same random-weight CLIP text model, same captions, torch on the same `--threads`):
- eager: transformers' CLIPTokenizerFast (Rust) + CLIPTextModel in batches of `--batch` captions, in this thread;
- served: `python -m jitembed.export` of that folder, served by jitembed.Server(model_repository=...) in this
  process (C++ HTTP, tokenizer.json in C++ on the preprocessing threads, dynamic batching up to `--batch`, the
  TorchScript module called from the batcher), driven by jitembed.Client with `--concurrency` captions in flight
  (one caption per request).
Prints a table, then one JSON object per line. Target (issue #32): served >= 0.9x eager at c=32.
The model is CLIP-shaped but small (`--hidden`, `--layers`) so that a 2-core machine measures more than the
GEMMs; state the config with the figure.
"""
import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, wait

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "python", "export"))


def make_folder(root, hidden, layers, max_length=77):
    import torch
    import transformers
    import fixtures

    d = os.path.join(root, "clip")
    vocab = fixtures._clip_vocab(d)
    json.dump({"tokenizer_class": "CLIPTokenizer", "model_max_length": max_length, "bos_token": "<|startoftext|>",
               "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "unk_token": "<|endoftext|>"},
              open(os.path.join(d, "tokenizer_config.json"), "w"))
    tok = transformers.AutoTokenizer.from_pretrained(d)
    for f in ("vocab.json", "merges.txt"):
        os.remove(os.path.join(d, f))
    tok.save_pretrained(d)
    cfg = transformers.CLIPTextConfig(vocab_size=len(vocab), hidden_size=hidden, intermediate_size=4 * hidden,
                                      num_hidden_layers=layers, num_attention_heads=max(1, hidden // 64),
                                      max_position_embeddings=max_length, bos_token_id=vocab["<|startoftext|>"],
                                      eos_token_id=vocab["<|endoftext|>"], pad_token_id=vocab["<|endoftext|>"])
    torch.manual_seed(0)
    transformers.CLIPTextModel(cfg).eval().save_pretrained(d)
    return d


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--captions", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads, both arms")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--idle-dispatch", action="store_true",
                    help="served: export with --idle-dispatch (a batch runs as soon as the model is idle) instead of the "
                         "export's default, Triton's rule (a batch waits up to the 2 ms queue delay for --batch rows)")
    args = ap.parse_args()

    import numpy as np
    import torch
    import transformers
    import fixtures
    import jitembed
    from jitembed import export

    torch.set_num_threads(args.threads)
    caps = fixtures.captions(args.captions, seed=7)
    work = tempfile.mkdtemp(prefix="bench_clip_")
    folder = make_folder(work, args.hidden, args.layers)
    repo = os.path.join(work, "repo")
    rc = export.main(["--model", folder, "--out", repo, "--name", "clip", "--max-batch-size", str(args.batch),
                      "--output", "pooler_output"] + (["--idle-dispatch"] if args.idle_dispatch else []))
    if rc != 0:
        raise SystemExit(f"export failed ({rc})")
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.CLIPTextModel.from_pretrained(folder).eval()

    def eager_round():
        t0 = time.perf_counter()
        outs = []
        with torch.inference_mode():
            for i in range(0, len(caps), args.batch):
                enc = tok(caps[i:i + args.batch], padding="max_length", max_length=77, truncation=True, return_tensors="pt")
                outs.append(model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).pooler_output)
        return len(caps) / (time.perf_counter() - t0), torch.cat(outs).numpy()

    rows = []
    with jitembed.Server(model_repository=repo, io_threads=2, preprocess_threads=args.threads) as server, \
            jitembed.Client(endpoints=[f"http://{server.url}"]) as client:
        def served_round():
            # a closed loop of `concurrency` requests in flight, submitted with embed_async from this one thread
            # (no Python thread per request competing for the GIL with the served model's call)
            t0 = time.perf_counter()
            outs = [None] * len(caps)
            pending = {}
            nxt = 0
            while nxt < len(caps) or pending:
                while nxt < len(caps) and len(pending) < args.concurrency:
                    pending[client.embed_async("clip", [caps[nxt].encode()], input="text")] = nxt
                    nxt += 1
                done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
                for f in done:
                    outs[pending.pop(f)] = f.result()["pooler_output__0"]
            return len(caps) / (time.perf_counter() - t0), np.concatenate(outs)

        served_round()  # warm-up: batcher, first-batch allocations
        eager_round()
        best = {"eager": 0.0, "served": 0.0}
        for _ in range(args.rounds):  # interleaved: the machine is shared
            for arm, fn in (("eager", eager_round), ("served", served_round)):
                r, out = fn()
                best[arm] = max(best[arm], r)
                if arm == "eager":
                    ref = out
                else:
                    diff = float(np.abs(out - ref).max())
    ratio = best["served"] / best["eager"]
    cfg = (f"CLIP text hidden {args.hidden}, {args.layers} layers, L 77, {args.threads} threads"
           + (", idle dispatch" if args.idle_dispatch else ", the export's batching (2 ms delay, full batches)"))
    print(f"{'arm':<10}{'captions/s':>12}   ({cfg}; served at c={args.concurrency}, eager batch {args.batch})")
    for arm in ("eager", "served"):
        print(f"{arm:<10}{best[arm]:>12.1f}")
    print(f"served / eager: {ratio:.2f}x (target >= 0.9); max |served - eager| {diff:.2e}")
    for arm in ("eager", "served"):
        rows.append({"bench": "clip_served", "arm": arm, "captions_per_s": round(best[arm], 1), "concurrency": args.concurrency,
                     "batch": args.batch, "hidden": args.hidden, "layers": args.layers, "threads": args.threads,
                     "idle_dispatch": args.idle_dispatch})
    rows.append({"bench": "clip_served", "metric": "served_over_eager", "value": round(ratio, 3), "max_abs_diff": diff,
                 "idle_dispatch": args.idle_dispatch})
    for r in rows:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
