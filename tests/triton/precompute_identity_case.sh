#!/usr/bin/env bash
# ctest triton/precompute_identity (run by run_tritonserver.py, which sets JITEMBED_TRITON_URL): a Triton
# model whose config.pbtxt carries parameters fingerprint + preprocess_key is usable by
# `jitembed-precompute --endpoints <triton>` without flags; one without them stops with the
# "publishes no parameters.fingerprint / preprocess_key" error naming --identity, and works with --identity.
set -euo pipefail
precompute="$1"; work="$2"; url="${JITEMBED_TRITON_URL:?run me through run_tritonserver.py}"
rm -rf "$work" && mkdir -p "$work/data"
for i in $(seq 1 12); do printf 'caption number %d about a cat\n' "$i" > "$work/data/c$i.txt"; done
run() { "$precompute" "$work/data" --endpoints "$url" --no-progress "$@"; }
out=$(run --models jit_text_identity --cache "$work/cache1" | tail -1)
echo "$out"
echo "$out" | grep -q '"computed":12,' || { echo "expected 12 computed with the identity from the model config"; exit 1; }
echo "$out" | grep -q '"errors":0,' || exit 1
again=$(run --models jit_text_identity --cache "$work/cache1" | tail -1)
echo "$again" | grep -q '"cached_hits":12,' || { echo "expected 12 hits on the rerun (same identity, same keys)"; exit 1; }
rc=0
run --models jit_text --cache "$work/cache2" > "$work/none.out" 2> "$work/none.err" || rc=$?
cat "$work/none.err"
[ "$rc" -eq 2 ] || { echo "no identity: exit $rc, expected 2"; exit 1; }
grep -q 'publishes no parameters.fingerprint / preprocess_key' "$work/none.err" || { echo "missing the stated error"; exit 1; }
grep -q -- '--identity jit_text' "$work/none.err" || { echo "the error does not name --identity"; exit 1; }
out=$(run --models jit_text --identity 'jit_text:text=triton-jit_text-v1,utf8;max_bytes=4096;' --cache "$work/cache2" | tail -1)
echo "$out"
echo "$out" | grep -q '"computed":12,' || { echo "expected 12 computed with --identity"; exit 1; }
echo "$out" | grep -q '"errors":0,' || exit 1
rc=0
run --models jit_text --identity 'jit_text=f' --cache "$work/cache3" > /dev/null 2> "$work/bad.err" || rc=$?
[ "$rc" -eq 2 ] && grep -q 'invalid_argument' "$work/bad.err" || { echo "a malformed --identity: exit $rc"; cat "$work/bad.err"; exit 1; }
echo "ok"
