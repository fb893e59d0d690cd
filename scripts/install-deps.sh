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
  # embedding service: HTTP on Boost.Beast (1.81 replaces Debian's default 1.74 dev headers), LibTorch adapter
  libboost1.81-dev libtorch-dev
  # programs, tests, benchmarks
  nlohmann-json3-dev libcli11-dev doctest-dev libbenchmark-dev
  libmsgpack-dev libprotobuf-dev protobuf-compiler
  ffmpeg tar
  # protocol peers for tests (tritonclient in .venv)
  python3-venv
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
if [ -x "$venv/bin/python" ]; then
  if "$venv/bin/python" -c "import tritonclient.http, numpy" 2>/dev/null; then
    echo "install-deps: .venv has tritonclient and numpy"
  elif "$venv/bin/python" -m pip install -q --disable-pip-version-check --timeout 30 --retries 2 "tritonclient[http]==2.73.0" numpy; then
    echo "install-deps: installed tritonclient[http] and numpy into .venv"
  else
    echo "install-deps: warning: could not install tritonclient into .venv (no network?); python tests will skip"
  fi
fi
