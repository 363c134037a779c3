#!/usr/bin/env bash
# Installs the Debian 12 packages vlmd needs to build and test, and nothing else.
# Idempotent and non-interactive: only missing packages are installed (apt-get update runs only
# then). Used by `make`, `make run`, `make test` and .ci/run. See README "Dependencies" for why
# each package is here.
set -euo pipefail

PACKAGES=(
  # toolchain
  g++ cmake ninja-build ccache pkg-config make git
  # fuzzing (libFuzzer + sanitizers)
  clang libclang-rt-14-dev
  # libraries
  libhwy-dev            # Highway: portable SIMD + per-target compilation
  nlohmann-json3-dev    # JSON for tools, fixtures and the API
  libcli11-dev          # command-line parsing of the tools
  libpcre2-dev          # tokenizer pre-split regexes (Unicode properties)
  libjpeg62-turbo-dev   # JPEG decoding of request images (libjpeg-turbo)
  libpng-dev            # PNG decoding of request images
  libwebp-dev           # WebP decoding of request images
  libssl-dev            # SHA-256 (libcrypto) for image cache keys and allowlists; TLS (libssl)
  libcpp-httplib-dev    # HTTP/1.1 clients: image URLs, OTLP span export, tests, vlmd-bench
  libboost1.81-dev      # Boost.Asio + Beast: the server's event-driven connection layer
  libspdlog-dev         # server logs
  libopencv-objdetect-dev  # redaction: OpenCV's cascade detector (number plates; faces optionally)
  opencv-data           # redaction: the cascade files (faces, Russian number plates)
  libdlib-dev           # redaction: dlib's HOG frontal-face detector
  libblas-dev liblapack-dev  # dlib's CMake package links libblas.so / liblapack.so by path
  # tests and benchmarks
  libgtest-dev libbenchmark-dev
  curl                  # the README's examples (scripts/smoke_run.sh), shell tests
  haproxy               # replicas behind the shipped load-balancer config (tests/deploy)
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# Node.js runs the official openai npm client against the server in the tests. A machine that
# already has node and npm (e.g. from another packager) keeps them: Debian's npm would conflict.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi
# kubectl decodes the Kubernetes manifest in the tests (offline). A machine with kubectl from
# Kubernetes' own repository keeps it: Debian's kubernetes-client ships the same file.
if ! command -v kubectl >/dev/null 2>&1; then
  missing+=(kubernetes-client)
fi
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "setup: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
