#!/usr/bin/env python3
"""ctest demo/model_repository: jit_train_demo on real encoders (the repository scripts/export_models.py writes:
a diffusers VAE, the per-frame video VAE, a T5 encoder), inline and jit on the same generated data.

  repository_case.py JIT_TRAIN_DEMO MODEL_REPOSITORY OUT_DIR

Both runs use --verify: every delivered embedding is compared with the same encoders run in the demo's process
(LibTorch, loaded from the repository as jitembed-server loads them) within the default tolerance (1e-5 max abs).
Checks, on each run's JSON line: lost = duplicated = failed = mismatches = 0, every sample of every epoch verified,
the loss falls; jit: epoch 1 sends requests, later epochs none (every lookup a cache hit); the per-epoch losses of
the two runs agree to 1e-4 relative (real encoders are not bitwise reproducible across batch compositions: the
inline run batches by training step, the server by arrival)."""
import json
import subprocess
import sys


def main():
    demo, repo, out = sys.argv[1:4]
    epochs = 2
    # 28 samples; the loader's window (2 requests of 2 samples in flight, 16 samples buffered) is smaller than
    # an epoch, so epoch 2 never looks up a sample whose epoch-1 request is still in flight.
    common = ["--model-repository", repo, "--epochs", str(epochs), "--images", "24", "--videos", "4", "--batch", "4",
              "--samples-per-request", "2", "--requests-in-flight", "2", "--out", out, "--no-progress", "--verify"]
    runs = {}
    failures = []
    for mode in ("inline", "jit"):
        p = subprocess.run([demo, "--mode", mode, *common, "--report", f"{out}/report-repository-{mode}.html"],
                           capture_output=True, text=True, timeout=600)
        print(f"--- {mode} (exit {p.returncode})\n{p.stdout}")
        if p.returncode != 0:
            print(p.stderr, file=sys.stderr)
            return 1
        lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
        if not lines:
            print(f"no JSON line in the output of --mode {mode}", file=sys.stderr)
            return 1
        j = json.loads(lines[-1])
        runs[mode] = j
        want = j["dataset_samples"] * epochs
        for key in ("lost_samples", "duplicated_samples", "failed_samples", "verify_mismatches"):
            if j[key] != 0:
                failures.append(f"{mode}: {key} = {j[key]}, expected 0")
        if j["samples"] != want or j["verified_samples"] != want:
            failures.append(f"{mode}: samples {j['samples']}, verified {j['verified_samples']}; expected {want} each")
        if not j["loss_epoch"][-1] < j["loss_epoch"][0]:
            failures.append(f"{mode}: the loss did not fall ({j['loss_epoch']})")
        if "vae_encoder" not in j.get("models", ""):
            failures.append(f"{mode}: models '{j.get('models')}' are not the repository's")
    jit = runs["jit"]
    if not jit["embed_requests_epoch"][0] > 0:
        failures.append("jit: epoch 1 sent no embed request")
    for e in range(1, epochs):
        if jit["embed_requests_epoch"][e] != 0 or jit["cache_hit_rate_epoch"][e] != 1:
            failures.append(f"jit: epoch {e} (0-based) sent {jit['embed_requests_epoch'][e]} requests, cache hit rate "
                            f"{jit['cache_hit_rate_epoch'][e]}; expected 0 and 1")
    for a, b in zip(runs["inline"]["loss_epoch"], jit["loss_epoch"]):
        if abs(a - b) > 1e-4 * max(abs(a), abs(b)):
            failures.append(f"per-epoch losses differ by more than 1e-4 relative: inline {runs['inline']['loss_epoch']}, "
                            f"jit {jit['loss_epoch']}")
            break
    if failures:
        print("jit_train_demo --model-repository checks failed:\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    print(f"jit_train_demo --model-repository: inline and jit agree (losses {jit['loss_epoch']}), nothing lost or "
          f"duplicated, every embedding verified against in-process LibTorch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
