#!/usr/bin/env bash
# Installs what `make test-arm64` needs besides scripts/setup.sh's packages: Debian's aarch64
# cross compiler, qemu-user to run the test binaries, and the engine's libraries as :arm64
# packages beside the native ones (multiarch). Idempotent; apt runs only when something is
# missing. If apt cannot fetch the arm64 indexes or install the packages, the foreign
# architecture is removed again (when no arm64 package got installed) so that the machine's apt
# is left as it was.
set -euo pipefail

PACKAGES=(
  g++-aarch64-linux-gnu qemu-user-static
  libhwy-dev:arm64 libpcre2-dev:arm64 libjpeg62-turbo-dev:arm64 libpng-dev:arm64
  libwebp-dev:arm64 libssl-dev:arm64 libgtest-dev:arm64 nlohmann-json3-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "setup-arm64: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "setup-arm64: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
added_arch=0
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  $SUDO dpkg --add-architecture arm64
  added_arch=1
fi
if ! $SUDO apt-get update -qq; then
  echo "setup-arm64: apt-get update failed with the arm64 architecture added" >&2
  if [ "$added_arch" = 1 ]; then $SUDO dpkg --remove-architecture arm64 || true; fi
  exit 1
fi
if ! $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"; then
  echo "setup-arm64: installing ${missing[*]} failed" >&2
  if [ "$added_arch" = 1 ] && ! dpkg -l | awk '{print $4}' | grep -qx arm64; then
    $SUDO dpkg --remove-architecture arm64 || true
  fi
  exit 1
fi
