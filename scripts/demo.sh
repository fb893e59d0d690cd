#!/usr/bin/env bash
# The demo: installs missing dependencies, builds jit_train_demo and jitembed-server (only those), then
# trains the same denoiser on the same generated data twice — embeddings computed inside the training step
# (--mode inline, the baseline), then just in time from a local jitembed-server through the prefetching
# loader and its cache (--mode jit) — and prints the speedup of jit over inline.
# Extra arguments go to both runs (e.g. --tp 2, --epochs 5, --sleep-us 8000, --data DIR).
#
# scripts/demo.sh --real [args]: the same on real encoders: installs the pinned PyTorch wheel (install-deps
# set torch, ~5 GB, once), builds with its LibTorch, exports a model repository with seeded random weights
# (scripts/export_models.py: a diffusers VAE, the per-frame video VAE, a T5 encoder with its SentencePiece
# model; TorchScript) and trains with --model-repository: inline runs the encoders in the training process,
# jit on a local jitembed-server serving the repository. Without args: 64 images and 8 clips, 3 epochs, batch 8.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
real=0
args=()
for a in "$@"; do
  if [ "$a" = "--real" ]; then real=1; else args+=("$a"); fi
done
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
torch_args=(-DJITEMBED_WITH_TORCH=OFF)
if [ "$real" = 1 ]; then
  bash scripts/install-deps.sh demo torch   # + the PyTorch wheel (its LibTorch) and SentencePiece
  torch_dir="$(.venv/bin/python -c "import importlib.util as u; print(u.find_spec('torch').submodule_search_locations[0])")"
  torch_args=(-DJITEMBED_WITH_TORCH=ON "-DCMAKE_PREFIX_PATH=$torch_dir" "-DJITEMBED_TORCH_PYTHON=$root/.venv/bin/python")
  build_dir="${BUILD_DIR:-build/demo-real}"
else
  bash scripts/install-deps.sh demo   # only what the demo needs (no LibTorch, no test peers)
  build_dir="${BUILD_DIR:-build/demo}"
fi
if [ -f "$build_dir/CMakeCache.txt" ] && ! grep -q "CMAKE_GENERATOR:INTERNAL=${generator[1]:-Unix Makefiles}" "$build_dir/CMakeCache.txt"; then
  rm -rf "$build_dir"
fi
cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DJITEMBED_BUILD_EXAMPLES=ON -DJITEMBED_BUILD_TOOLS=ON \
  -DJITEMBED_BUILD_TESTS=OFF -DJITEMBED_BUILD_BENCHMARKS=OFF "${torch_args[@]}"
cmake --build "$build_dir" -j "${JOBS:-2}" --target jit_train_demo jitembed-server
if [ "$real" = 1 ]; then
  repo="$build_dir/model_repository"
  .venv/bin/python scripts/export_models.py --out "$repo" --no-aoti   # cached: a rerun returns at once
  if [ "${#args[@]}" -eq 0 ]; then args=(--images 64 --videos 8 --epochs 3 --batch 8); fi
  args=(--model-repository "$repo" "${args[@]}")
fi
set -- ${args[@]+"${args[@]}"}

demo="$build_dir/examples/jit_train_demo/jit_train_demo"
out="${DEMO_OUT:-$build_dir/jit_train_demo_out}"
mkdir -p "$out"
echo "== inline: embeddings computed in the training step (baseline)"
"$demo" --mode inline --out "$out" "$@" | tee "$out/inline.txt"
echo
echo "== jit: embeddings from jitembed-server, prefetched and cached"
"$demo" --mode jit --out "$out" "$@" | tee "$out/jit.txt"

# The two JSON lines, side by side.
field() { grep '^{' "$1" | tail -1 | sed -n "s/.*\"$2\":\(\[[^]]*\]\|[^,}]*\).*/\1/p"; }
first() { echo "$1" | tr -d '[]' | cut -d, -f1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
inline_sps="$(field "$out/inline.txt" samples_per_s)"
jit_sps="$(field "$out/jit.txt" samples_per_s)"
inline_e1="$(first "$(field "$out/inline.txt" samples_per_s_epoch)")"
jit_e1="$(first "$(field "$out/jit.txt" samples_per_s_epoch)")"
# One verdict, one name, in the text and the JSON: do the per-epoch losses of the two runs match within the
# tolerance? Exact on the reference models (bit-identical embeddings: the same printed losses); 1e-4
# relative with --real: real encoders' embeddings differ in the last bits between batch compositions (the
# inline run batches by step, the server by arrival).
if [ "$real" = 1 ]; then loss_tol="1e-4"; loss_tol_text="within 1e-4 relative"; else loss_tol="0"; loss_tol_text="exact"; fi
losses_match="$(awk -v a="$(field "$out/inline.txt" loss_epoch | tr -d '[]')" -v b="$(field "$out/jit.txt" loss_epoch | tr -d '[]')" \
                    -v tol="$loss_tol" 'BEGIN {
  n = split(a, x, ","); m = split(b, y, ","); ok = (n == m && n > 0)
  for (i = 1; i <= n && ok; i++) {
    if (tol == 0) { if (x[i] != y[i]) ok = 0; continue }  # the printed values equal
    d = x[i] - y[i]; if (d < 0) d = -d; s = x[i] < 0 ? -x[i] : x[i]; if (d > tol * s) ok = 0
  }
  print ok ? "true" : "false" }')"
echo
echo "speedup jit/inline: $(ratio "$jit_sps" "$inline_sps")x overall ($jit_sps vs $inline_sps samples/s), $(ratio "$jit_e1" "$inline_e1")x in epoch 1 (cold cache: $jit_e1 vs $inline_e1 samples/s); trainer stall $(field "$out/jit.txt" trainer_stall_fraction) vs $(field "$out/inline.txt" trainer_stall_fraction); epoch losses jit vs inline match ($loss_tol_text): $([ "$losses_match" = true ] && echo yes || echo no)"
echo "{\"bench\":\"jit_train_demo_speedup\",\"speedup\":$(ratio "$jit_sps" "$inline_sps"),\"speedup_epoch1\":$(ratio "$jit_e1" "$inline_e1"),\"jit_samples_per_s\":$jit_sps,\"inline_samples_per_s\":$inline_sps,\"epoch_losses_match\":$losses_match,\"epoch_losses_rel_tolerance\":$loss_tol,\"real_encoders\":$([ "$real" = 1 ] && echo true || echo false)}"
[ "$losses_match" = true ]
