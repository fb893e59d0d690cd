#!/usr/bin/env python3
"""ctest driver of examples/python_train (labels python;torch): runs train.py under
`torchrun --nproc_per_node 2 --standalone` on a tiny generated data set and checks what it printed.

  jit_vs_inline   one epoch in each mode (jit with --verify): nothing lost, duplicated or failed, every served
                  embedding within 1e-6 of the in-process encoders, the epoch losses within LOSS_RTOL.
  resume_jit      jit with an LMDB cache: an uninterrupted epoch (fills the cache), then the same run stopped
                  mid-epoch (--stop-after-steps, --checkpoint) and resumed (--resume): the resumed run's epoch loss
                  equals the uninterrupted one bitwise (both read the embeddings the first run cached, so only the
                  checkpoint — model, optimizer, RNG, loader state, partial sums — can make them differ).
  resume_inline   inline, two epochs, stopped mid-epoch 2 and resumed: both epoch losses bitwise equal.

    python3 ctest_case.py CASE --out DIR [--server-bin BIN] [--model-repository DIR] [--venv DIR]

Exit 77 (skip) with the reason when torch / torchrun, the jitembed module, the exported repository or
jitembed-server is missing.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SKIP = 77
LOSS_RTOL = 1e-6  # jit vs inline: the served VAE latents differ from in-process ones by <= ~4e-7 (batch composition)
EMBED_TOL = 1e-6


def skip(why):
    print(f"SKIP: {why}")
    sys.exit(SKIP)


def fail(why):
    print(f"FAIL: {why}")
    sys.exit(1)


def run_train(o, tag, args, timeout=120):
    out_json = os.path.join(o.out, f"{tag}.json")
    if os.path.exists(out_json):
        os.remove(out_json)
    cmd = [o.torchrun, "--nproc_per_node", "2", "--standalone", os.path.join(HERE, "train.py"),
           "--images", "12", "--batch", "4", "--model-repository", o.model_repository, "--out", o.out,
           "--report", os.path.join(o.out, f"{tag}.html"), "--json", out_json, "--no-progress"] + args
    if o.server_bin:
        cmd += ["--server-bin", o.server_bin]
    t = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
                       env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONFAULTHANDLER="1"))  # a crash prints its stacks
    print(f"--- {tag} ({time.perf_counter() - t:.1f} s): {' '.join(cmd[4:])}")
    print("\n".join(line for line in p.stdout.splitlines() if not line.startswith("{")))
    if p.returncode != 0 or not os.path.isfile(out_json):
        fail(f"{tag}: train.py exited with {p.returncode}")
    with open(out_json) as f:
        j = json.load(f)
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    if not lines or json.loads(lines[-1]) != j:
        fail(f"{tag}: the JSON line printed last differs from --json's")
    report = os.path.join(o.out, f"{tag}.html")
    if not os.path.isfile(report) or open(report, encoding="utf-8").read().count("<svg") != 4:
        fail(f"{tag}: no HTML report with its 4 charts at {report}")
    for k in ("lost_samples", "duplicated_samples", "failed_samples", "verify_mismatches"):
        if j[k]:
            fail(f"{tag}: {k} = {j[k]}")
    return j


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=["jit_vs_inline", "resume_jit", "resume_inline"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--server-bin", default="")
    ap.add_argument("--model-repository", default=os.path.join(ROOT, "build", "release", "model_repository"))
    ap.add_argument("--venv", default=os.path.join(ROOT, ".venv"))
    o = ap.parse_args()

    o.torchrun = os.path.join(o.venv, "bin", "torchrun")
    python = os.path.join(o.venv, "bin", "python")
    if not os.path.isfile(o.torchrun) or not os.path.isfile(python):
        skip(f"no torchrun in {o.venv} (bash scripts/install-deps.sh torch)")
    probe = subprocess.run([python, "-c", "import torch, torchvision, sentencepiece, PIL, jitembed"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if probe.returncode != 0:
        skip(f"{python} lacks torch / torchvision / sentencepiece / Pillow / jitembed: {probe.stdout.strip().splitlines()[-1:]}")
    for m in ("vae_encoder", "t5_encoder"):
        if not os.path.isfile(os.path.join(o.model_repository, m, "1", "model.pt")):
            skip(f"no exported {m} in {o.model_repository} (ctest models/export, or scripts/export_models.py --out DIR)")
    if o.case != "resume_inline":
        if o.server_bin and not os.path.isfile(o.server_bin):
            skip(f"no jitembed-server at {o.server_bin}")
        if not o.server_bin and not os.path.isfile(os.path.join(ROOT, "build", "release", "tools", "jitembed-server")):
            import shutil
            if not shutil.which("jitembed-server"):
                skip("no jitembed-server (build the tools, or put it on PATH)")
    os.makedirs(o.out, exist_ok=True)

    if o.case == "jit_vs_inline":
        inline = run_train(o, "inline", ["--mode", "inline", "--epochs", "1"])
        jit = run_train(o, "jit", ["--mode", "jit", "--epochs", "1", "--verify", "--verify-tolerance", str(EMBED_TOL)])
        if jit["verified_samples"] != jit["dataset_samples"]:
            fail(f"jit --verify checked {jit['verified_samples']} of {jit['dataset_samples']} samples")
        a, b = inline["loss_epoch"], jit["loss_epoch"]
        if len(a) != 1 or len(b) != 1:
            fail(f"epoch losses: inline {a}, jit {b}")
        rel = abs(a[0] - b[0]) / abs(a[0])
        print(f"losses: inline {a[0]!r}, jit {b[0]!r}: relative difference {rel:.3g} (tolerance {LOSS_RTOL:g}); "
              f"served vs in-process embeddings max abs {jit['verify_max_abs']:.3g} (tolerance {EMBED_TOL:g})")
        if rel > LOSS_RTOL:
            fail("jit and inline epoch losses differ beyond the tolerance")
    else:
        mode = o.case.split("_")[1]
        ck = os.path.join(o.out, f"{mode}.ckpt")
        common = ["--mode", mode]
        if mode == "jit":
            cache = os.path.join(o.out, "cache")
            if os.path.isdir(cache):
                import shutil
                shutil.rmtree(cache)
            common += ["--epochs", "1", "--cache-dir", cache]
            stop = 2  # of 3 steps in the epoch
        else:
            common += ["--epochs", "2"]
            stop = 4  # the first of epoch 2's 3 steps
        if os.path.exists(ck):
            os.remove(ck)
        full = run_train(o, f"{mode}-full", common)
        stopped = run_train(o, f"{mode}-stopped", common + ["--stop-after-steps", str(stop), "--checkpoint", ck])
        if not os.path.isfile(ck):
            fail("no checkpoint written")
        if len(stopped["loss_epoch"]) != len(full["loss_epoch"]) - 1:
            fail(f"the stopped run finished {len(stopped['loss_epoch'])} epochs; it should stop in the last one")
        resumed = run_train(o, f"{mode}-resumed", common + ["--resume", ck])
        print(f"losses: uninterrupted {full['loss_epoch']}, resumed {resumed['loss_epoch']}")
        if resumed["loss_epoch"] != full["loss_epoch"]:
            fail("the resumed run's losses differ from the uninterrupted run's")
        if mode == "jit" and resumed["embed_requests"] != 0:
            fail(f"the resumed run sent {resumed['embed_requests']} requests: the cache should have held every embedding")
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
