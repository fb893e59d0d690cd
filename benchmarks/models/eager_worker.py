"""Arm (a) of bench_models.py: in-process PyTorch, started once per workload (pinned by its parent with taskset)
and then driven through stdin: one JSON command per line {"kind": "eager" | "ts", "batch": N, "seconds": S,
"min_batches": B}, one JSON result per line on stdout. The tensors are preprocessed once at start (PIL +
torchvision, as the Triton and Ray arms do per request), so a batch's time is the encoder's alone.

  python eager_worker.py WORKLOAD MODEL_FILE SIZE THREADS JPEG...
"""
import io
import json
import sys
import time

import torch
from PIL import Image
from torchvision import transforms as T

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import bench_models  # noqa: E402  (build_module: the eager module with export_models.py's seed)


def main() -> int:
    workload, model_file, size, threads, jpegs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]
    torch.set_num_threads(threads)
    import warnings
    warnings.filterwarnings("ignore")
    modules = {"eager": bench_models.build_module(torch, workload), "ts": torch.jit.load(model_file).eval()}
    tf = T.Compose([T.Resize(size), T.CenterCrop(size), T.ToTensor(), T.Normalize([0.5] * 3, [0.5] * 3)])
    images = [tf(Image.open(io.BytesIO(open(f, "rb").read())).convert("RGB")) for f in jpegs]
    with torch.inference_mode():  # the two modules agree (the same weights): checked once
        x = torch.stack(images[:2])
        diff = float((modules["eager"](x) - modules["ts"](x)).abs().max())
    print(json.dumps({"ready": True, "eager_vs_torchscript_max_abs": diff, "torch_threads": torch.get_num_threads()}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        m, n = modules[cmd["kind"]], int(cmd["batch"])
        x = torch.stack([images[i % len(images)] for i in range(n)])
        lat = []
        with torch.inference_mode():
            m(x)  # warm-up
            c0, t0 = time.process_time(), time.perf_counter()
            while time.perf_counter() - t0 < cmd["seconds"] or len(lat) < cmd.get("min_batches", 2):
                t = time.perf_counter()
                m(x)
                lat.append(1e3 * (time.perf_counter() - t))
            cpu = time.process_time() - c0
        lat.sort()
        mean = sum(lat) / len(lat)
        print(json.dumps({"images_per_s": 1e3 * n / mean, "p50_ms": lat[len(lat) // 2], "p99_ms": lat[min(len(lat) - 1, int(0.99 * len(lat)))],
                          "measured": n * len(lat), "cpu_ms_per_image": 1e3 * cpu / (n * len(lat)), "failed": 0}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
