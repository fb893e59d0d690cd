#!/usr/bin/env python3
"""hf_tokenizer (C++) against the Python `tokenizers` library (Rust), one thread each, on the caption corpus of
tests/tokenizers/make_corpus.py: captions per second and the ratio, side by side in one run.

  ninja -C build/release bench_tokenizer
  .venv/bin/python benchmarks/models/bench_tokenizer.py [--build build/release] [--dir DIR] [--rounds 3]

Rust arm: Tokenizer.encode_batch_fast(all captions) with RAYON_NUM_THREADS=1 and TOKENIZERS_PARALLELISM=false (one
call per pass; the Encoding objects it returns are part of its cost, as for any Python caller). C++ arm: bench_tokenizer
(hf_tokenizer::encode per caption in a loop, the hf_encoding built). Both get a warm-up pass (the BPE word caches), the
rounds interleave the two, the best pass of each is kept. Prints a table, then one JSON object per line.
"""
import argparse
import json
import os
import subprocess
import sys
import time

os.environ["RAYON_NUM_THREADS"] = "1"  # before tokenizers starts its pool
os.environ["TOKENIZERS_PARALLELISM"] = "false"

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "tokenizers"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--dir", help="make_corpus.py output (default: BUILD/tokenizers_reference, made when missing)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokenizers", default="clip,gpt2,llama3,bert,t5")
    args = ap.parse_args()
    import make_corpus
    from tokenizers import Tokenizer

    d = args.dir or os.path.join(args.build, "tokenizers_reference")
    if not os.path.isfile(os.path.join(d, "cases.json")):
        subprocess.run([sys.executable, os.path.join(ROOT, "tests", "tokenizers", "make_corpus.py"), "--out", d], check=True)
    corpus = make_corpus.read_corpus(os.path.join(d, "corpus.bin"))
    names = args.tokenizers.split(",")
    exe = os.path.join(args.build, "benchmarks", "models", "bench_tokenizer")
    rust, cpp, rust_tokens, cpp_tokens = {}, {}, {}, {}
    toks = {n: Tokenizer.from_file(os.path.join(d, n + ".json")) for n in names}
    for n, t in toks.items():
        t.no_truncation()
        t.no_padding()
        t.encode_batch_fast(corpus)  # warm-up
    for _ in range(args.rounds):
        for n, t in toks.items():
            t0 = time.perf_counter()
            encs = t.encode_batch_fast(corpus)
            rust[n] = min(rust.get(n, 1e300), time.perf_counter() - t0)
            rust_tokens[n] = sum(len(e.ids) for e in encs)
        out = subprocess.run([exe, "--dir", d, "--passes", "1", "--tokenizers", *names], check=True, capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("{"):
                j = json.loads(line)
                n = j["bench"].rsplit("/", 1)[1]
                cpp[n] = min(cpp.get(n, 1e300), j["captions"] / j["captions_per_s"])
                cpp_tokens[n] = j["tokens"]
    print(f"{'tokenizer':<10} {'captions':>9} {'rust capt/s':>12} {'c++ capt/s':>12} {'ratio':>7}  tokens equal")
    lines = []
    for n in names:
        r, c = len(corpus) / rust[n], len(corpus) / cpp[n]
        same = rust_tokens[n] == cpp_tokens[n]
        print(f"{n:<10} {len(corpus):>9} {r:>12.0f} {c:>12.0f} {c / r:>6.2f}x  {same}")
        lines.append({"bench": f"tokenizers/{n}", "captions": len(corpus), "rust_captions_per_s": round(r, 1),
                      "cpp_captions_per_s": round(c, 1), "ratio": round(c / r, 3), "tokens_equal": same,
                      "rust_arm": "encode_batch_fast, RAYON_NUM_THREADS=1"})
    for l in lines:
        print(json.dumps(l))
    return 0


if __name__ == "__main__":
    sys.exit(main())
