#!/usr/bin/env bash
# ctest tools/precompute_endpoints: jitembed-precompute --endpoints fills the cache through a jitembed-server
# on 127.0.0.1, and an in-process run over the same cache then finds every key (the server's metadata
# fingerprint and preprocess key equal the in-process model's: the same cache keys either way).
set -euo pipefail
server="$1"; precompute="$2"; work="$3"
rm -rf "$work" && mkdir -p "$work/data"
for i in $(seq 1 12); do printf 'caption number %d about a cat\n' "$i" > "$work/data/c$i.txt"; done
"$server" --port 0 --model text-embed > "$work/server.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  grep -q "listening on" "$work/server.log" && break
  sleep 0.1
done
url=$(grep -o 'http://127.0.0.1:[0-9]*' "$work/server.log" | head -1)
[ -n "$url" ] || { echo "server did not start"; cat "$work/server.log"; exit 1; }
remote=$("$precompute" "$work/data" --models text-embed --endpoints "$url" --cache "$work/cache" --no-progress | tail -1)
echo "$remote"
echo "$remote" | grep -q '"computed":12,' || { echo "expected 12 computed through the service"; exit 1; }
echo "$remote" | grep -q '"errors":0,' || exit 1
printf '# fleet\n%s\n' "$url" > "$work/endpoints.txt"
again=$("$precompute" "$work/data" --models text-embed --endpoints-file "$work/endpoints.txt" --cache "$work/cache" --no-progress | tail -1)
echo "$again"
echo "$again" | grep -q '"cached_hits":12,' || { echo "expected 12 hits through the endpoints file"; exit 1; }
local_run=$("$precompute" "$work/data" --models text-embed --cache "$work/cache" --no-progress | tail -1)
echo "$local_run"
echo "$local_run" | grep -q '"cached_hits":12,' || { echo "expected the in-process run to hit every key"; exit 1; }
bad=0
"$precompute" "$work/data" --models text-embed --endpoints "http://127.0.0.1:1" --cache "$work/cache2" --no-progress > /dev/null 2>&1 || bad=$?
[ "$bad" -eq 2 ] || { echo "unreachable endpoints: exit $bad, expected 2"; exit 1; }
echo "ok"
