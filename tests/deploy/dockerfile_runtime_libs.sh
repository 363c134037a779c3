#!/usr/bin/env bash
# Checks that the runtime stage of deploy/Dockerfile installs the Debian package of every shared
# library the vlmd binary needs directly (its DT_NEEDED entries; their own dependencies come with
# those packages), so the image starts. Packages of debian:12-slim itself need not be listed.
# Usage: dockerfile_runtime_libs.sh BUILD/bin/vlmd deploy/Dockerfile. Skips (77) without dpkg.
set -euo pipefail
binary=$1
dockerfile=$2
command -v dpkg >/dev/null && command -v readelf >/dev/null || { echo "no dpkg/readelf: skipped"; exit 77; }
# Package names are those of the image's Debian release: compare only on that release.
grep -q '^VERSION_CODENAME=bookworm' /etc/os-release 2>/dev/null || { echo "not Debian 12: skipped"; exit 77; }

base="libc6 libgcc-s1 libstdc++6 zlib1g"
# The package names after the runtime stage's `apt-get install` (the last FROM onwards).
listed=$(awk '/^FROM /{stage=$0; text=""} {text=text" "$0} END{print text}' "$dockerfile" |
         tr ' \\' '\n\n' | grep -E '^lib|^ca-certificates$' | sort -u | tr '\n' ' ')
missing=0
for lib in $(readelf -d "$binary" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p'); do
  # awk reads to the end: an early exit would give ldconfig SIGPIPE, a failure under pipefail.
  path=$(ldconfig -p | awk -v l="$lib" '$1 == l && /x86-64/ && !found {print $NF; found = 1}')
  if [ -z "$path" ]; then echo "cannot find $lib"; missing=1; continue; fi
  pkg=$(dpkg -S "$(readlink -f "$path")" 2>/dev/null || dpkg -S "$path" 2>/dev/null || true)
  pkg=${pkg%%:*}
  if [ -z "$pkg" ]; then echo "no package owns $path ($lib)"; missing=1; continue; fi
  case " $base $listed " in
    *" $pkg "*) echo "ok: $lib <- $pkg" ;;
    *) echo "MISSING from the Dockerfile runtime stage: $pkg (for $lib)"; missing=1 ;;
  esac
done
exit $missing
