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
  # programs, tests, benchmarks
  nlohmann-json3-dev libcli11-dev doctest-dev libbenchmark-dev
  libmsgpack-dev libprotobuf-dev protobuf-compiler
  ffmpeg tar
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
