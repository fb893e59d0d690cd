#!/usr/bin/env bash
# ctest examples/minimal_trainer: the README's minimal trainer against a jitembed-server started with its
# defaults on 127.0.0.1, over 12 JPEGs with same-stem captions (made with ffmpeg's test source).
set -euo pipefail
server="$1"; trainer="$2"; work="$3"
rm -rf "$work" && mkdir -p "$work/data"
for i in $(seq 1 12); do
  ffmpeg -loglevel error -f lavfi -i "testsrc=size=96x64:rate=1" -vf "hue=h=$((i * 30))" -frames:v 1 -y "$work/data/s$i.jpg"
  printf 'test pattern number %d, hue %d degrees\n' "$i" "$((i * 30))" > "$work/data/s$i.txt"
done
"$server" --port 0 > "$work/server.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  grep -q "listening on" "$work/server.log" && break
  sleep 0.1
done
url=$(grep -o 'http://127.0.0.1:[0-9]*' "$work/server.log" | head -1)
[ -n "$url" ] || { echo "server did not start"; cat "$work/server.log"; exit 1; }
out=$(timeout 120 "$trainer" "$work/data" --endpoints "$url" --epochs 2)
echo "$out"
[ "$(echo "$out" | grep -c ': 12 samples, 0 failed')" -eq 2 ] || { echo "expected 2 epochs of 12 samples, 0 failed"; exit 1; }
code=0
"$trainer" "$work/data" --endpoints "$url" --bogus-flag > /dev/null 2>&1 || code=$?
[ "$code" -ne 0 ] || { echo "an unknown flag was accepted"; exit 1; }
"$trainer" --help | grep -q -- "--endpoints" || { echo "--help does not list --endpoints"; exit 1; }
echo "ok"
