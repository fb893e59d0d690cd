#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention at bench_parallel --device cuda sdpa's shapes, and the comparison.

  python3 benchmarks/parallel/sdpa_torch.py [--compare BENCH_SDPA.jsonl]

B 1, S 65,536, D 80 (the Qwen ViT's head size), 16 and 4 heads, bf16, not causal, forward + backward, the
tensors laid out [B, S, H, D] as jitembed's (torch sees a [B, H, S, D] view of them). Prints one JSON line per
configuration and backend: PyTorch's own choice ("default") and each fused backend forced with
torch.nn.attention.sdpa_kernel (a backend that refuses the shape reports its error); tokens/s from CUDA
events (best of 3 batches of 2 steps after a warm-up) and the peak of torch's allocator during the step.
--compare: reads bench_parallel's JSON lines (gpu_sdpa/cudnn/...) and prints jitembed's tokens/s over
PyTorch's default, target >= 0.9 (exit 1 when a ratio misses it or a side is missing).
Run by scripts/gpu-check.sh on the GPU machine (its python3 has PyTorch; no network needed).
"""
import argparse
import json
import sys

import torch
import torch.nn.functional as F

B, S, D = 1, 65536, 80
HEADS = (16, 4)


def step_ms(q, k, v, dout, iters=2):
    def run():
        q.grad = k.grad = v.grad = None
        out = F.scaled_dot_product_attention(q, k, v, is_causal=False)
        out.backward(dout)

    run()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters):
            run()
        b.record()
        b.synchronize()
        best = min(best, a.elapsed_time(b) / iters)
    return best


def measure(heads, backend):
    name = f"torch_sdpa/{backend}/s{S}_h{heads}_d{D}"
    torch.cuda.empty_cache()
    g = torch.Generator(device="cuda").manual_seed(heads)
    # [B, S, H, D] memory seen as [B, H, S, D]: the same layout jitembed's bshd tensors have
    def make():
        return torch.randn(B, S, heads, D, device="cuda", dtype=torch.bfloat16, generator=g).transpose(1, 2)

    q, k, v = (make().requires_grad_() for _ in range(3))
    dout = make()
    ctx = None
    if backend != "default":
        from torch.nn.attention import SDPBackend, sdpa_kernel
        ctx = sdpa_kernel({"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                           "efficient": SDPBackend.EFFICIENT_ATTENTION}[backend])
    try:
        if ctx is not None:
            ctx.__enter__()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        ms = step_ms(q, k, v, dout)
        peak = torch.cuda.max_memory_allocated()
    except Exception as e:  # a backend that does not take this shape
        return {"bench": name, "failed": 1, "error": str(e).splitlines()[0][:300]}
    finally:
        if ctx is not None:
            ctx.__exit__(None, None, None)
    io = 8 * B * S * heads * D * 2  # q k v out dout dq dk dv, as jitembed's figure
    return {"bench": name, "tokens_per_s": B * S / (ms / 1e3), "unit": "tokens/s", "step_ms": ms, "batch": B,
            "seq": S, "heads": heads, "head_dim": D, "causal": False, "dtype": "bf16",
            "peak_bytes": peak, "inputs_bytes_before": base, "io_bytes": io, "torch": torch.__version__}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compare", help="bench_parallel's JSON lines (gpu_sdpa/cudnn/...)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("sdpa_torch: no CUDA device")
        return 1
    results = {}
    for heads in HEADS:
        for backend in ("default", "flash", "cudnn"):
            r = measure(heads, backend)
            print(json.dumps(r), flush=True)
            results[(heads, backend)] = r
    if not args.compare:
        return 0
    mine = {}
    with open(args.compare, encoding="utf-8") as f:
        for line in f:
            if line.startswith("{"):
                j = json.loads(line)
                if j.get("bench", "").startswith("gpu_sdpa/cudnn/") and "tokens_per_s" in j:
                    mine[j["heads"]] = j
    status = 0
    for heads in HEADS:
        t = results[(heads, "default")]
        j = mine.get(heads)
        name = f"sdpa_vs_torch/s{S}_h{heads}_d{D}"
        if j is None or "tokens_per_s" not in t:
            print(json.dumps({"bench": name, "failed": 1, "error": "missing jitembed or torch figure"}))
            status = 1
            continue
        ratio = j["tokens_per_s"] / t["tokens_per_s"]
        print(json.dumps({"bench": name, "ratio": ratio, "unit": "x", "target": 0.9, "meets_target": ratio >= 0.9,
                          "jitembed_tokens_per_s": j["tokens_per_s"], "torch_tokens_per_s": t["tokens_per_s"],
                          "jitembed_peak_bytes": j.get("pool_peak_bytes"), "torch_peak_bytes": t["peak_bytes"]}))
        if ratio < 0.9:
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
