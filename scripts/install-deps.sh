#!/usr/bin/env bash
# Installs the Debian 12 packages jitembed's build, tests, tools and benchmarks need; idempotent: only
# what is missing is installed (apt-get update runs only then). Later components add their packages here.
set -euo pipefail

packages=(
  build-essential cmake pkg-config ninja-build
  # core
  libxxhash-dev libdlpack-dev
  # codecs
  libzstd-dev libturbojpeg0-dev libavformat-dev libavcodec-dev libavutil-dev libswscale-dev
  # cache stores (redis-server also brings redis-benchmark, for tests and bench_cache)
  liblmdb-dev libhiredis-dev redis-server lmdb-utils
  # embedding service: HTTP on Boost.Beast (Debian's default Boost 1.74: libboost1.81-dev conflicts with
  # libmsgpack-dev's libboost-dev dependency, and msgpack-c is bench_format's baseline), LibTorch adapter
  libboost-dev libtorch-dev
  # parallelism: Gloo collectives on CPU, CBLAS GEMMs (OpenBLAS)
  libgloo-dev libopenblas-dev
  # programs, tests, benchmarks
  nlohmann-json3-dev libcli11-dev doctest-dev libbenchmark-dev
  libmsgpack-dev libprotobuf-dev protobuf-compiler
  ffmpeg tar
  # protocol peers for tests (tritonclient, pytest and perf_analyzer in .venv; perf_analyzer needs libb64)
  python3-venv libb64-0d
  # Triton test peer (tests/triton): Debian's Python 3.11 for .venv-triton; its Python backend stub links libpython3.11
  python3.11 python3.11-venv libpython3.11
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
else
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Python protocol peers (tritonclient + numpy) in .venv for the python-labelled tests. Installed only when
# not importable; no network must not fail the script (those tests then skip with a message).
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" || echo "install-deps: warning: could not create $venv"
fi
pip_install() {
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --timeout 30 --retries 2 "$@"
}
if [ -x "$venv/bin/python" ]; then
  if "$venv/bin/python" -c "import tritonclient.http, numpy, pytest" 2>/dev/null; then
    echo "install-deps: .venv has tritonclient, numpy and pytest"
  elif pip_install "tritonclient[http]==2.73.0" numpy pytest==9.2.0; then
    echo "install-deps: installed tritonclient[http], numpy and pytest into .venv"
  else
    echo "install-deps: warning: could not install tritonclient into .venv (no network?); python tests will skip"
  fi
  # perf_analyzer: PyPI's perf-analyzer wheels need glibc 2.38 (Debian 12 has 2.36); the binary bundled in
  # tritonclient 2.47.0 runs here. It links libcudart.so.12 even without a GPU (nvidia-cuda-runtime-cu12).
  if [ -x "$venv/perf_analyzer/bin/perf_analyzer" ] && "$venv/bin/python" -c "import nvidia.cuda_runtime" 2>/dev/null; then
    echo "install-deps: .venv has perf_analyzer"
  elif pip_install nvidia-cuda-runtime-cu12==12.9.79 &&
       pip_install --no-deps --target "$venv/perf_analyzer" tritonclient==2.47.0; then
    echo "install-deps: installed perf_analyzer (tritonclient 2.47.0) into .venv/perf_analyzer"
  else
    echo "install-deps: warning: could not install perf_analyzer; its test will skip"
  fi
fi

# --- Triton test peer (tests/triton) ------------------------------------------------------------------------
# A real Triton Inference Server for the client's interop tests, CPU only: the tritonserver binary and the
# Python backend from the nvidia-pytriton wheel, in their own .venv-triton (the wheel pins numpy < 2), made
# with Debian's python3.11 (the backend stub embeds Debian's libpython3.11, so the venv must match it).
# Idempotent: skipped when already set up with this version. In CI the Triton tests must run, so a failed
# setup is an error (exit 1) unless JITEMBED_SKIP_TRITON=1 (then the tests skip with exit 77).
# Fresh install: about 20 s with PyPI reachable, ~370 MiB on disk.
triton_pytriton_version="0.7.0"  # tritonserver 2.51.0
triton_numpy_version="1.26.4"
setup_triton() {
  local tv="$root/.venv-triton" py=/usr/bin/python3.11 stamp want ts
  stamp="$tv/.jitembed-triton"
  want="nvidia-pytriton==$triton_pytriton_version numpy==$triton_numpy_version"
  ts="$tv/lib/python3.11/site-packages/pytriton/tritonserver"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$ts/bin/tritonserver" ] &&
     cmp -s "$ts/python_backend_stubs/3.11/triton_python_backend_stub" "$ts/backends/python/triton_python_backend_stub"; then
    echo "install-deps: .venv-triton has $want (tritonserver + Python backend stub)"
    return 0
  fi
  [ -x "$py" ] || { echo "install-deps: error: $py (Debian's python3.11) is missing"; return 1; }
  if [ ! -x "$tv/bin/python" ] || ! grep -q "^home = /usr/bin$" "$tv/pyvenv.cfg" 2>/dev/null; then
    rm -rf "$tv"
    "$py" -m venv "$tv" || return 1
  fi
  rm -f "$stamp"
  "$tv/bin/python" -m pip install -q --disable-pip-version-check --timeout 60 --retries 3 \
    "nvidia-pytriton==$triton_pytriton_version" "numpy==$triton_numpy_version" || return 1
  [ -x "$ts/bin/tritonserver" ] || { echo "install-deps: error: no $ts/bin/tritonserver in the wheel"; return 1; }
  install -m 755 "$ts/python_backend_stubs/3.11/triton_python_backend_stub" "$ts/backends/python/" || return 1
  # every shared library resolves (libpython3.11 from Debian, the rest bundled in the wheel), and it runs
  local f
  for f in "$ts/bin/tritonserver" "$ts/backends/python/libtriton_python.so" "$ts/backends/python/triton_python_backend_stub"; do
    if ldd "$f" | grep "not found" >/dev/null; then
      echo "install-deps: error: $f has missing libraries:"; ldd "$f" | grep "not found"; return 1
    fi
  done
  local help; help="$("$ts/bin/tritonserver" --help 2>&1 || true)"  # --help exits 1
  case "$help" in *--model-repository*) ;; *) echo "install-deps: error: tritonserver does not run: $help" | head -5; return 1 ;; esac
  "$tv/bin/python" -c "import numpy" || return 1
  echo "$want" > "$stamp"
  echo "install-deps: installed $want into .venv-triton and the Python 3.11 backend stub"
}
if [ "${JITEMBED_SKIP_TRITON:-0}" = "1" ]; then
  echo "install-deps: JITEMBED_SKIP_TRITON=1: Triton test peer not set up (its tests will skip)"
elif ! setup_triton; then
  echo "install-deps: error: could not set up the Triton test peer in .venv-triton (set JITEMBED_SKIP_TRITON=1 to skip it)"
  exit 1
fi
# --- end Triton test peer -----------------------------------------------------------------------------------
