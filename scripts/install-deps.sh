#!/usr/bin/env bash
# Installs the Debian 12 packages that the named sets need; idempotent: only what is missing is installed
# (apt-get update runs only then).
#   bash scripts/install-deps.sh [set...]        default: all
# Sets:
#   <component>  a jitembed component and every component it needs (core, codec, batching, kserve, http,
#                zstd, format, cache, lmdb, redis, jpeg, video, models, models_image, models_video, tokenizers, torch,
#                server, protobuf, repository, grpc, client, loader, parallel, tcp_store, gloo), e.g. `format jpeg` for an application that uses
#                those two (configuring jitembed itself with its defaults needs every default component:
#                `test`, or turn the others off with -DJITEMBED_WITH_<X>=OFF)
#   build        compiler, CMake, Ninja, pkg-config, ccache (part of every set)
#   core         build + the core component
#   tools        jitembed-inspect, jitembed-server, jitembed-precompute, configured with
#                -DJITEMBED_WITH_TORCH=OFF -DJITEMBED_WITH_PARALLEL=OFF -DJITEMBED_BUILD_TESTS=OFF
#                -DJITEMBED_BUILD_BENCHMARKS=OFF -DJITEMBED_BUILD_EXAMPLES=OFF
#   demo         scripts/demo.sh: jit_train_demo and jitembed-server (configured with
#                -DJITEMBED_WITH_TORCH=OFF -DJITEMBED_BUILD_TESTS=OFF -DJITEMBED_BUILD_BENCHMARKS=OFF):
#                no LibTorch, no test peers
#   torch        the torch component: LibTorch from the pinned PyTorch wheel (torch==2.15.0) in .venv, with
#                what scripts/export_models.py needs (torchvision, diffusers, transformers, sentencepiece,
#                protobuf; pinned);
#                configure with -DCMAKE_PREFIX_PATH="$(.venv/bin/python -c 'import os, torch;
#                print(os.path.dirname(torch.__file__))')" (scripts/test.sh does). Debian's libtorch-dev 1.13
#                is not used: it cannot load what current PyTorch exports (docs/models.md)
#   test         the test command (scripts/test.sh): every CPU component (the torch set for the torch tests),
#                tools, tests, benchmarks, the test peers (redis-server, lmdb-utils, ffmpeg, Python peers
#                in .venv, conan in .venv for ctest packaging/conan, the Triton peer in .venv-triton)
#   ray          jitembed.ray (tests/python/ray, benchmarks/python/bench_ray.py): the python set plus
#                ray[serve]==2.60.0 in .venv; part of `test`
#   python       the jitembed Python module (python/) built and installed into .venv with its test deps
#                (nanobind, scikit-build-core, pytest, numpy, msgpack, msgpack-numpy, Pillow); skipped when its
#                sources are unchanged since the last install; part of `test` (not of `demo`)
#   bench-models benchmarks/models/bench_models.py: the test set (torch, Ray, the Triton peer) and, for its
#                Triton arm, the pinned torch (with torchvision, Pillow) importable in .venv-triton (optional)
#   cudnn        the cuDNN frontend headers for the cudnn component (CUDA builds): the pinned
#                nvidia-cudnn-frontend wheel in .venv (cmake/FindCUDNN.cmake finds its include/); part of
#                `test` where a CUDA toolkit is installed (cuDNN itself comes with the toolkit)
#   all          test
# The per-component Debian packages follow cmake/components.json (ctest packaging/graph checks them).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Debian packages of each component's own external dependencies (cmake/components.json)
declare -A component_debs=(
  [core]="libxxhash-dev libdlpack-dev"
  [codec]=""
  [batching]=""
  [kserve]="nlohmann-json3-dev"
  [http]="libboost-dev libssl-dev"
  [zstd]="libzstd-dev"
  [format]=""
  [cache]=""
  [lmdb]="liblmdb-dev"
  [redis]="libhiredis-dev"
  [jpeg]="libturbojpeg0-dev"
  [video]="libavformat-dev libavcodec-dev libavutil-dev libswscale-dev"
  [models]=""
  [models_image]=""
  [models_video]="nlohmann-json3-dev"
  [tokenizers]="nlohmann-json3-dev libpcre2-dev libutf8proc-dev"
  [torch]=""
  [server]="zlib1g-dev"
  [protobuf]="libprotobuf-dev libprotoc-dev"
  [repository]="libprotobuf-dev libprotoc-dev"
  [grpc]="libprotobuf-dev libprotoc-dev libgrpc++-dev protobuf-compiler-grpc"
  [client]=""
  [loader]=""
  [parallel]="libopenblas-dev"
  [tcp_store]="libboost-dev"
  [gloo]="libgloo-dev"
)
# the jitembed components each one links (cmake/components.json)
declare -A component_requires=(
  [core]=""
  [codec]="core"
  [batching]="core"
  [kserve]="core"
  [http]="core"
  [zstd]="core codec"
  [format]="core zstd"
  [cache]="core format"
  [lmdb]="cache"
  [redis]="cache"
  [jpeg]="core codec"
  [video]="core codec"
  [models]="core zstd format"
  [models_image]="models jpeg"
  [models_video]="models_image video"
  [tokenizers]="core"
  [torch]="models_video tokenizers"
  [server]="kserve batching models_video format"
  [protobuf]="core"
  [repository]="server protobuf"
  [grpc]="server client protobuf"
  [client]="http kserve models cache format"
  [loader]="client cache format"
  [parallel]="core"
  [tcp_store]="parallel"
  [gloo]="parallel"
)
# building jitembed's own programs, tests and benchmarks (cmake/components.json "development")
# (Debian's default Boost 1.74: libboost1.81-dev conflicts with libmsgpack-dev's libboost-dev dependency, and
# msgpack-c is bench_format's baseline)
declare -A development_debs=(
  [tools]="libcli11-dev nlohmann-json3-dev"
  [tests]="doctest-dev clang-14"
  [benchmarks]="libbenchmark-dev libmsgpack-dev libprotobuf-dev protobuf-compiler"
)
build_debs="build-essential cmake pkg-config ninja-build ccache"
# programs the tests run: redis-server (with redis-benchmark), lmdb-utils, ffmpeg, tar, openssl (test certificates); protocol peers
# (tritonclient, pytest and perf_analyzer in .venv; perf_analyzer needs libb64; wrk for bench_wrk.py); the Triton test peer
# (tests/triton): Debian's Python 3.11 for .venv-triton, whose Python backend stub links libpython3.11
test_peer_debs="redis-server lmdb-utils ffmpeg tar openssl python3-venv libb64-0d python3.11 python3.11-venv libpython3.11 wrk"
# components the default configure builds without the CUDA toolkit (the test command's CPU build)
cpu_components="core codec batching kserve http zstd format cache lmdb redis jpeg video models models_image models_video tokenizers torch server protobuf repository grpc client loader parallel tcp_store gloo"

sets=("$@")
if [ ${#sets[@]} -eq 0 ]; then sets=(all); fi
components=()
dev=()
with_test_peers=0
with_ray=0
with_bench_models=0
with_cudnn=0
for s in "${sets[@]}"; do
  case "$s" in
    build) ;;
    cudnn) with_cudnn=1 ;;
    python) components+=(server repository grpc client loader lmdb redis jpeg video tokenizers) ;;  # what python/CMakeLists.txt links (repository: Server(model_repository=); grpc: Server(grpc_port=))
    all | test) components+=($cpu_components); dev+=(tools tests benchmarks); with_test_peers=1; with_ray=1
      if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then with_cudnn=1; fi ;;  # test.sh builds CUDA then
    ray) components+=(server grpc client loader lmdb redis jpeg video); dev+=(tools tests); with_ray=1 ;;  # + the python set
    tools) components+=(server repository grpc client lmdb redis); dev+=(tools) ;;
    bench-models) components+=($cpu_components); dev+=(tools tests benchmarks); with_test_peers=1; with_ray=1; with_bench_models=1 ;;
    demo) components+=(server repository grpc client loader gloo jpeg video lmdb redis); dev+=(tools) ;;  # jit_train_demo + jitembed-server
    *)
      if [ -n "${component_requires[$s]+x}" ]; then
        components+=("$s")
      else
        echo "install-deps: unknown set '$s' (sets: build core tools demo cudnn test all, or a component: ${!component_requires[*]})" >&2
        exit 2
      fi ;;
  esac
done
with_python=0
case " ${sets[*]} " in *" python "* | *" test "* | *" all "* | *" ray "* | *" bench-models "*) with_python=1 ;; esac
if [ "$with_python" = 1 ]; then packages_python="python3-venv"; else packages_python=""; fi
# closure over the component graph
closed=()
todo=(core "${components[@]}")
while [ ${#todo[@]} -gt 0 ]; do
  c="${todo[0]}"; todo=("${todo[@]:1}")
  case " ${closed[*]} " in *" $c "*) continue ;; esac
  closed+=("$c")
  todo+=(${component_requires[$c]})
done
packages=($build_debs)
for c in "${closed[@]}"; do packages+=(${component_debs[$c]}); done
for d in "${dev[@]}"; do packages+=(${development_debs[$d]}); done
if [ "$with_test_peers" = 1 ]; then packages+=($test_peer_debs); fi
packages+=($packages_python)
if [ "$with_ray" = 1 ] || [ "$with_cudnn" = 1 ]; then packages+=(python3-venv); fi
with_torch=0
# (the torch set also builds SentencePiece against the system protobuf: libprotobuf-dev, protoc)
case " ${closed[*]} " in *" torch "*) with_torch=1; packages+=(python3-venv libprotobuf-dev protobuf-compiler) ;; esac
mapfile -t packages < <(printf '%s\n' "${packages[@]}" | awk 'NF && !seen[$0]++')
echo "install-deps: sets ${sets[*]}: components ${closed[*]}"
if [ "${JITEMBED_INSTALL_DEPS_LIST:-0}" = "1" ]; then  # print the Debian packages and stop (for measurements)
  printf '%s\n' "${packages[@]}"
  exit 0
fi

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

# pip into a venv, retried: a transient index or download failure (seen once in CI: conan's install failed
# while every other package of the same run installed) must not fail the run. 3 attempts, 10 s and 20 s apart;
# pip's own --retries covers single HTTP requests, not a failed sdist build or a reset mid-download.
pip_retry() {
  local py="$1"; shift
  local attempt
  for attempt in 1 2 3; do
    if "$py" -m pip install -q --disable-pip-version-check --timeout 30 --retries 3 "$@"; then return 0; fi
    if [ "$attempt" -lt 3 ]; then
      echo "install-deps: pip install $* failed (attempt $attempt of 3); retrying in $((attempt * 10)) s" >&2
      sleep $((attempt * 10))
    fi
  done
  return 1
}

# Ray Serve for jitembed.ray, pinned (the version its tests run against), in .venv. The ray tests must run
# in CI: a failed install is an error.
if [ "$with_ray" = 1 ]; then
  ray_venv="$root/.venv"
  if [ ! -x "$ray_venv/bin/python" ]; then python3 -m venv "$ray_venv"; fi
  if [ "$("$ray_venv/bin/python" -c 'import ray, ray.serve, pytest; print(ray.__version__)' 2>/dev/null)" = "2.60.0" ]; then
    echo "install-deps: .venv has ray[serve] 2.60.0"
  elif pip_retry "$ray_venv/bin/python" "ray[serve]==2.60.0" pytest==9.2.0; then
    echo "install-deps: installed ray[serve] 2.60.0 into .venv"
  else
    echo "install-deps: error: could not install ray[serve]==2.60.0 into .venv" >&2
    exit 1
  fi
fi


# --- the cuDNN frontend (the cudnn component) ----------------------------------------------------------------
# Header-only C++ (include/cudnn_frontend.h); its PyPI wheel is the pinned way to get it (the wheel's Python
# part is not used). A failed install is an error: the cudnn component is REQUIRED in a CUDA build
# (-DJITEMBED_WITH_CUDNN=OFF without it).
cudnn_pins="nvidia-cudnn-frontend==1.32.0"
if [ "$with_cudnn" = 1 ]; then
  if [ ! -x "$root/.venv/bin/python" ]; then python3 -m venv "$root/.venv"; fi
  if [ "$("$root/.venv/bin/python" -c 'import importlib.metadata as m; print(m.version("nvidia-cudnn-frontend"))' 2>/dev/null)" = "${cudnn_pins#*==}" ]; then
    echo "install-deps: .venv has $cudnn_pins"
  else
    pip_retry "$root/.venv/bin/python" --no-deps $cudnn_pins ||
      { echo "install-deps: error: could not install $cudnn_pins into .venv" >&2; exit 1; }
    echo "install-deps: installed $cudnn_pins into .venv"
  fi
fi

# --- PyTorch (the torch component) ------------------------------------------------------------------------
# The torch component builds against the LibTorch inside the PyTorch wheel (TorchConfig.cmake, headers,
# libtorch_cpu.so, libtorch_cuda.so for CUDA 13), pinned, in .venv: the same environment as the jitembed
# Python module and Ray, so one PyTorch (~5 GiB with its CUDA libraries) serves the C++ build, the exporter
# (scripts/export_models.py: diffusers, transformers, sentencepiece, protobuf for transformers' T5Tokenizer
# conversion, the version Ray's grpc already brings to .venv; torchvision for the preprocessing comparisons) and Python code that hands torch tensors to jitembed. Skipped when every pin is installed.
# torchdata for StatefulDataLoader (jitembed.torch.Loader's checkpoint test; 0.11.0 is pure Python and
# works with torch 2.15, warning once that torch.set_vital is deprecated).
# A failed install is an error: the torch component is REQUIRED once on (-DJITEMBED_WITH_TORCH=OFF without it).
torch_pins="torch==2.15.0 torchvision==0.29.2 diffusers==0.42.1 transformers==5.24.0 sentencepiece==0.2.3 protobuf==7.36.2 torchdata==0.11.0"
if [ "$with_torch" = 1 ]; then
  torch_venv="$root/.venv"
  if [ ! -x "$torch_venv/bin/python" ]; then python3 -m venv "$torch_venv"; fi
  # shellcheck disable=SC2086
  torch_have="$("$torch_venv/bin/python" - $torch_pins <<'PY' 2>/dev/null || true
import importlib.metadata as m, sys
print(" ".join(f"{p.split('==')[0]}=={m.version(p.split('==')[0])}" for p in sys.argv[1:]))
PY
)"
  if [ "$torch_have" = "$torch_pins" ]; then
    echo "install-deps: .venv has $torch_pins"
  else
    # shellcheck disable=SC2086
    pip_retry "$torch_venv/bin/python" $torch_pins ||
      { echo "install-deps: error: could not install $torch_pins into .venv" >&2; exit 1; }
    echo "install-deps: installed $torch_pins into .venv"
  fi
fi
# SentencePiece for models/tokenizer.hpp (the repository's text models), built here from its PyPI sdist as a
# static PIC library against the system protobuf, into .deps/sentencepiece (cmake/FindSentencePiece.cmake
# searches only there). Not Debian's libsentencepiece-dev: its libsentencepiece.so.0 embeds protobuf 3.14 and
# exports those symbols, so a process that also loads libprotobuf.so.32 (config.pbtxt) crashes at start-up.
# 0.2.0 is the last sdist that bundles abseil (0.2.1+ fetch it from GitHub at configure time). ~15 s of build.
spm_version=0.2.0
spm_prefix="$root/.deps/sentencepiece"
if [ "$with_torch" = 1 ]; then
  if [ -f "$spm_prefix/lib/libsentencepiece.a" ] && [ "$(cat "$spm_prefix/VERSION" 2>/dev/null)" = "$spm_version" ]; then
    echo "install-deps: .deps has SentencePiece $spm_version"
  else
    spm_tmp="$(mktemp -d)"
    for attempt in 1 2 3; do
      if "$torch_venv/bin/python" -m pip download -q --disable-pip-version-check --timeout 30 --retries 3 --no-deps \
           --no-binary :all: -d "$spm_tmp" "sentencepiece==$spm_version"; then break; fi
      if [ "$attempt" = 3 ]; then echo "install-deps: error: could not download the sentencepiece $spm_version sdist" >&2; exit 1; fi
      sleep $((attempt * 10))
    done
    tar -xzf "$spm_tmp/sentencepiece-$spm_version.tar.gz" -C "$spm_tmp"
    spm_src="$spm_tmp/sentencepiece-$spm_version/sentencepiece"
    cmake -S "$spm_src" -B "$spm_tmp/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPM_PROTOBUF_PROVIDER=package \
      -DSPM_ENABLE_SHARED=OFF -DSPM_ENABLE_TCMALLOC=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=ON >"$spm_tmp/configure.log" 2>&1 &&
      cmake --build "$spm_tmp/build" --target sentencepiece-static -j "${JOBS:-2}" >"$spm_tmp/build.log" 2>&1 ||
      { tail -n 30 "$spm_tmp/configure.log" "$spm_tmp/build.log" >&2 || true
        echo "install-deps: error: could not build SentencePiece $spm_version" >&2; exit 1; }
    rm -rf "$spm_prefix"
    mkdir -p "$spm_prefix/include" "$spm_prefix/lib"
    cp "$spm_src/src/sentencepiece_processor.h" "$spm_prefix/include/"
    cp "$spm_tmp/build/src/libsentencepiece.a" "$spm_prefix/lib/"
    cp "$spm_src/LICENSE" "$spm_prefix/" 2>/dev/null || true
    echo "$spm_version" >"$spm_prefix/VERSION"
    rm -rf "$spm_tmp"
    echo "install-deps: built SentencePiece $spm_version (static, system protobuf) into .deps/sentencepiece"
  fi
fi
# --- end PyTorch --------------------------------------------------------------------------------------------
# --- the jitembed Python module (python/) -------------------------------------------------------------------
# pip install of ./python into .venv (no build isolation: the pinned nanobind / scikit-build-core below, and
# the build tree python/build/ is reused, so a rebuild after a change recompiles only what changed). Skipped
# when a hash over its sources (python/, include/, cmake/, CMakeLists.txt; ~20 ms) and the pins match the last
# install and the module imports. A fresh build of the extension takes minutes on 2 cores. After the PyTorch
# block: the module links the SentencePiece built there (.deps/sentencepiece, jitembed.Model's text models) and
# libprotobuf / libprotoc when present (Server(model_repository=...)); both are part of the hash.
if [ "$with_python" = 1 ]; then
  py_venv="$root/.venv"
  py_pins="nanobind==3.1.0 scikit-build-core==1.1.2 pytest==9.2.0 numpy msgpack msgpack-numpy Pillow"
  py_stamp="$py_venv/.jitembed-python"
  py_hash="$(cd "$root" && { find python include cmake CMakeLists.txt -type f ! -path 'python/build/*' ! -name '*.pyc' -print0 |
               LC_ALL=C sort -z | xargs -0 sha256sum
             cat .deps/sentencepiece/VERSION 2>/dev/null || echo no-sentencepiece
             ls /usr/include/google/protobuf/compiler/importer.h 2>/dev/null || echo no-protoc; } | sha256sum | cut -d' ' -f1)"
  if [ ! -x "$py_venv/bin/python" ]; then python3 -m venv "$py_venv"; fi
  if [ -f "$py_stamp" ] && [ "$(cat "$py_stamp")" = "$py_hash $py_pins" ] &&
     "$py_venv/bin/python" -c "import jitembed._jitembed, pytest, numpy, msgpack, msgpack_numpy, PIL" 2>/dev/null; then
    echo "install-deps: .venv has the jitembed Python module (sources unchanged)"
  else
    rm -f "$py_stamp"
    # shellcheck disable=SC2086
    pip_retry "$py_venv/bin/python" $py_pins ||
      { echo "install-deps: error: could not install the Python module's build and test dependencies" >&2; exit 1; }
    CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
      "$py_venv/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps "$root/python" ||
      { echo "install-deps: error: could not build the jitembed Python module (pip install ./python)" >&2; exit 1; }
    echo "$py_hash $py_pins" > "$py_stamp"
    echo "install-deps: built and installed the jitembed Python module into .venv"
  fi
fi
# --- end jitembed Python module --------------------------------------------------------------------------------

if [ "$with_test_peers" != 1 ]; then
  exit 0
fi

# Python protocol peers (tritonclient + numpy) in .venv for the python-labelled tests. Installed only when
# not importable; no network must not fail the script (those tests then skip with a message).
venv="$root/.venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" || echo "install-deps: warning: could not create $venv"
fi
pip_install() { pip_retry "$venv/bin/python" "$@"; }
if [ -x "$venv/bin/python" ]; then
  if "$venv/bin/python" -c "import tritonclient.http, numpy, pytest" 2>/dev/null; then
    echo "install-deps: .venv has tritonclient, numpy and pytest"
  elif pip_install "tritonclient[http]==2.73.0" numpy pytest==9.2.0; then
    echo "install-deps: installed tritonclient[http], numpy and pytest into .venv"
  else
    echo "install-deps: warning: could not install tritonclient into .venv (no network?); python tests will skip"
  fi
  # tritonclient.grpc (python/interop_grpc): grpcio, which ray[serve] usually brought already. Not the [grpc]
  # extra: it pins protobuf < 7, and the torch set pins protobuf 7 (tritonclient's generated code runs on it).
  if "$venv/bin/python" -c "import tritonclient.grpc" 2>/dev/null; then
    echo "install-deps: .venv has tritonclient.grpc"
  elif pip_install "grpcio==1.85.3" packaging "protobuf>=6.30"; then
    echo "install-deps: installed grpcio for tritonclient.grpc into .venv"
  else
    echo "install-deps: warning: could not install grpcio into .venv; python/interop_grpc will skip"
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
  # conan for ctest packaging/conan (conan create + test_package, offline: the system's packages are
  # platform requirements); pinned. That test must run in CI (it fails without conan), so a failed install is
  # an error here, not a warning that surfaces 20 minutes later as a failed test.
  if [ "$("$venv/bin/conan" --version 2>/dev/null)" = "Conan version 2.34.0" ]; then
    echo "install-deps: .venv has conan 2.34.0"
  elif pip_install conan==2.34.0 && [ -x "$venv/bin/conan" ]; then
    echo "install-deps: installed conan 2.34.0 into .venv"
  else
    echo "install-deps: error: could not install conan 2.34.0 into .venv (ctest packaging/conan needs it)" >&2
    exit 1
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
  pip_retry "$tv/bin/python" "nvidia-pytriton==$triton_pytriton_version" "numpy==$triton_numpy_version" || return 1
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

# --- torch in .venv-triton (set bench-models: benchmarks/models, Triton's Python-backend arm) ----------------
# The Triton arm's model.py imports the pinned torch 2.15.0 (+ torchvision, Pillow). `pip install torch==2.15.0`
# into .venv-triton would fetch the CUDA 13 wheels again (about 3 GB of nvidia-* wheels; no pip cache here, and
# only PyPI is reachable, not the CPU-only index). Both venvs run CPython 3.11, so the wheels .venv installed
# (the torch set, the same pinned files) serve .venv-triton too: a .pth appends .venv's site-packages to
# .venv-triton's sys.path, after its own, so its numpy 1.26.4 (what the Python backend stub needs) still wins.
# Checked: numpy is 1.26.4 from .venv-triton, torch is 2.15.0. Skipped when already so.
if [ "$with_bench_models" = 1 ]; then
  tv="$root/.venv-triton"
  torch_sp="$("$root/.venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  check_triton_torch() {
    "$tv/bin/python" - "$tv" <<'PY' 2>/dev/null
import sys, numpy, torch, torchvision, PIL
assert numpy.__version__ == "1.26.4" and numpy.__file__.startswith(sys.argv[1]), numpy.__file__
assert torch.__version__.split("+")[0] == "2.15.0", torch.__version__
PY
  }
  if check_triton_torch; then
    echo "install-deps: .venv-triton imports torch 2.15.0 (with numpy 1.26.4 of its own)"
  else
    echo "$torch_sp" > "$tv/lib/python3.11/site-packages/zz-jitembed-torch.pth"
    check_triton_torch ||
      { echo "install-deps: error: .venv-triton cannot import torch 2.15.0 from $torch_sp with its numpy 1.26.4" >&2; exit 1; }
    echo "install-deps: .venv-triton imports torch 2.15.0 from $torch_sp (zz-jitembed-torch.pth)"
  fi
fi
