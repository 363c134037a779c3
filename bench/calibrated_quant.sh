#!/usr/bin/env bash
# Calibrated INT4 against plain INT4 (issue 24): KL divergence of the next-token distributions of
# Q4_K text models to the F16 model, on held-out image+prompt samples, for plain Q4_K, imatrix
# Q4_K, AWQ + Q4_K and AWQ + imatrix Q4_K at the same file size.
#
# The model is vlmd-synth's (random weights) with outlier channels (--outlier-channels), since a
# random model has none and calibration has nothing to find there. Images: the fixtures' PNGs,
# alternately for calibration and held out; prompts: random words (bash's RANDOM, seeded). In
# every variant the tied embedding / output head is kept at Q8_0 (--tensor-type), as
# llama-quantize's Q4_K_M keeps the head above 4 bits; the importance matrix does not cover it.
#
# Usage: bench/calibrated_quant.sh [BUILD_DIR]
#   env: PRESET (demo), OUTLIERS (8), SCALE (16), SEED (1), THREADS (2), KEEP (1: keep the files)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "${1:-$root/build}" && pwd)/bin
preset=${PRESET:-demo} outliers=${OUTLIERS:-8} scale=${SCALE:-16} seed=${SEED:-1} threads=${THREADS:-2}
work=$(mktemp -d)
[[ "${KEEP:-0}" == 1 ]] || trap 'rm -rf "$work"' EXIT

"$bin/vlmd-synth" --preset "$preset" --out "$work/f16" --seed "$seed" \
  --outlier-channels "$outliers" --outlier-scale "$scale" >/dev/null

# Samples: images split alternately, each with a prompt of random words; some text-only prompts.
words=(the a red blue green small large cat dog house tree car road sky water light dark man woman
       child photo image picture shows what is there in on near far left right top bottom colour
       shape count how many describe this scene object)
RANDOM=$seed
sentence() { local n=$1 out=""; for ((w = 0; w < n; ++w)); do out+="${words[RANDOM % ${#words[@]}]} "; done; echo "$out?"; }
mkdir -p "$work/calib" "$work/held"
i=0
for img in "$root"/tests/fixtures/*/images/*.png; do
  split=$([[ $((i % 2)) == 0 ]] && echo calib || echo held)
  name=$(basename "$(dirname "$(dirname "$img")")")-$(basename "$img" .png)
  cp "$img" "$work/$split/$name.png"
  sentence $((10 + RANDOM % 20)) > "$work/$split/$name.txt"
  i=$((i + 1))
done
for ((t = 0; t < 6; ++t)); do
  sentence $((30 + RANDOM % 30)) > "$work/calib/text$t.txt"
  sentence $((30 + RANDOM % 30)) > "$work/held/text$t.txt"
done

q="$bin/vlmd-quantize"
"$q" calibrate -m "$work/f16/text.gguf" --mmproj "$work/f16/mmproj.gguf" --data "$work/calib" \
  -o "$work/calib.imatrix" -t "$threads" | tail -1
keep=(--tensor-type token_embd=q8_0 -q -t "$threads")
"$q" "$work/f16/text.gguf" "$work/plain.gguf" q4_k "${keep[@]}" >/dev/null
"$q" "$work/f16/text.gguf" "$work/imatrix.gguf" q4_k --imatrix "$work/calib.imatrix" "${keep[@]}" >/dev/null
"$q" "$work/f16/text.gguf" "$work/awq.gguf" q4_k --awq "$work/calib.imatrix" "${keep[@]}" | grep '^AWQ:'
"$q" "$work/f16/text.gguf" "$work/awq-imatrix.gguf" q4_k --awq "$work/calib.imatrix" \
  --imatrix "$work/calib.imatrix" "${keep[@]}" >/dev/null

echo "preset $preset, $outliers outlier channels x $scale, seed $seed; held out: $(ls "$work/held" | grep -c png) images + 6 text prompts"
printf '%-22s %9s %10s %8s %10s %8s\n' variant "size MiB" "mean KL" "KL/plain" "top-1" "NMSE"
plain_kl=""
for v in plain imatrix awq awq-imatrix; do
  f="$work/$v.gguf"
  line=$("$q" eval --ref "$work/f16/text.gguf" --test "$f" --mmproj "$work/f16/mmproj.gguf" \
           --data "$work/held" -t "$threads" | tail -1)
  kl=$(sed -E 's/.*mean KL ([0-9.]+).*/\1/' <<<"$line")
  top1=$(sed -E 's/.*agreement ([0-9.]+).*/\1/' <<<"$line")
  nmse=$(sed -E 's/.*NMSE ([0-9.e+-]+).*/\1/' <<<"$line")
  [[ -n "$plain_kl" ]] || plain_kl=$kl
  size=$(awk -v b="$(stat -c %s "$f")" 'BEGIN { printf "%.2f", b / 1048576 }')
  printf '%-22s %9s %10s %8s %10s %8s\n' "q4_k $v" "$size" "$kl" \
    "$(awk -v a="$kl" -v b="$plain_kl" 'BEGIN { printf "%.3f", a / b }')" "$top1" "$nmse"
done
