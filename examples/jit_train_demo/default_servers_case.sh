#!/usr/bin/env bash
# ctest demo/default_servers: jit_train_demo pointed (--endpoints) at a jitembed-server started with its
# defaults (image latents [4,32,32], 768-dim captions: not what the demo's model is sized for) stops with
# an error naming the server flags it needs; a server started with those flags then trains, every
# embedding equal to the in-process models' (--verify), over HTTP and (a server with gRPC) over grpc://.
set -euo pipefail
server="$1"; demo="$2"; work="$3"
rm -rf "$work" && mkdir -p "$work"
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done' EXIT
# start_server LOG ARGS...: starts a server in this shell (not in a $(...) subshell, whose pids+= the EXIT
# trap would never see: the servers outlived the test) and sets $url to its URL
start_server() {
  local log="$1"; shift
  "$server" --host 127.0.0.1 --port 0 "$@" > "$log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 200); do
    grep -q "listening on" "$log" && break
    sleep 0.1
  done
  url=$(grep -o 'http://127.0.0.1:[0-9]*' "$log" | head -1)
  [ -n "$url" ] || { echo "server did not start"; cat "$log"; exit 1; }
}
common=(--images 8 --videos 0 --epochs 1 --batch 4 --sleep-us 0 --sleep-us-per-row 0 --no-progress --out "$work/out")

start_server "$work/default.log"
rc=0
"$demo" --endpoints "$url" "${common[@]}" > "$work/default_run.log" 2>&1 || rc=$?
cat "$work/default_run.log"
[ "$rc" -ne 0 ] || { echo "expected the run against default servers to fail"; exit 1; }
grep -q "do not match the model" "$work/default_run.log" || { echo "no shape mismatch error"; exit 1; }
flags=$(grep -o -- '--model image-latent:[^ ]* --model video-latent:[^ ]* --model text-embed:[^ ]*' "$work/default_run.log" | head -1)
[ -n "$flags" ] || { echo "the error does not name the server flags"; exit 1; }
echo "named flags: $flags"

# The flags the error names make a server the demo trains against.
read -r -a flag_args <<< "$flags"
grpc_flag=()
"$server" --help | grep -q -- --grpc-port && grpc_flag=(--grpc-port 0)
start_server "$work/sized.log" "${flag_args[@]}" "${grpc_flag[@]}"
urls=("$url")
if [ ${#grpc_flag[@]} -gt 0 ]; then
  for _ in $(seq 1 100); do grep -q "gRPC listening on" "$work/sized.log" && break; sleep 0.1; done
  urls+=("grpc://$(grep -o 'gRPC listening on [0-9.:]*' "$work/sized.log" | awk '{print $4}')")
fi
for u in "${urls[@]}"; do
  log="$work/sized_run_${u%%:*}.log"
  "$demo" --endpoints "$u" "${common[@]}" --verify > "$log" 2>&1 || { cat "$log"; echo "run at $u with the named flags failed"; exit 1; }
  tail -3 "$log"
  grep -q '"verified_samples":8,' "$log" || { echo "expected all 8 samples at $u verified against the in-process models"; exit 1; }
done
echo "ok"
