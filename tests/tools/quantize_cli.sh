#!/usr/bin/env bash
# vlmd-quantize's calibrated path end to end on the tiny-smolvlm fixture: calibrate from a folder
# of images with prompts and from a JSONL of requests, quantize with the importance matrix and
# with AWQ, the "--text --vision" pair, eval (0 against itself, > 0 against a Q4_0 file), and one
# clear error line (exit 2) for bad data.
# Usage: quantize_cli.sh BIN_DIR FIXTURES_DIR
set -u
bin=$1
fx=$2/tiny-smolvlm
q="$bin/vlmd-quantize"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# A folder: two images with prompts, one without (default prompt), one text-only prompt.
mkdir "$dir/calib"
cp "$fx/images/img-128x128.png" "$fx/images/img-128x96.png" "$fx/images/img-50x100.png" "$dir/calib/"
echo "What is in the middle of this picture? Tell me about its colours and shapes." > "$dir/calib/img-128x128.txt"
echo "Count the objects you can see here, then name the largest one of them." > "$dir/calib/img-128x96.txt"
echo "Write one sentence about the sea, one about the sky and one about the hills near the town." > "$dir/calib/text-only.txt"
out=$("$q" calibrate -m "$fx/text.gguf" --mmproj "$fx/mmproj.gguf" --data "$dir/calib" -o "$dir/im.gguf" -t 2) \
  || fail "calibrate (folder)"
printf '%s' "$out" | grep -q '^4 samples, .* 14 matrices recorded' || fail "calibrate summary: $out"
printf '%s' "$out" | grep -q '^img-50x100.png .*(48 image rows)' || fail "image sample without prompt: $out"

# The imatrix weighs all 14 decoder matrices (Q4_0 fits the fixture's 64-column rows).
out=$("$q" "$fx/text.gguf" "$dir/q4-im.gguf" q4_0 --imatrix "$dir/im.gguf" -q -t 2) || fail "quantize --imatrix"
printf '%s' "$out" | grep -q '^14 of them weighted' || fail "--imatrix: $out"
out=$("$q" "$fx/text.gguf" "$dir/q4-awq.gguf" q4_0 --awq "$dir/im.gguf" -q -t 2) || fail "quantize --awq"
printf '%s' "$out" | grep -q '^AWQ: [1-6] of 6 matrix groups scaled' || fail "--awq: $out"
"$q" "$fx/text.gguf" "$dir/x.gguf" q4_0 --awq-alpha 0.5 2>/dev/null
test $? -eq 2 || fail "--awq-alpha without --awq is not an error"
"$q" "$fx/text.gguf" "$dir/x.gguf" q4_0 --tensor-type 'attn_v' 2>/dev/null
test $? -eq 2 || fail "a --tensor-type without =TYPE is not an error"

err=$("$q" "$fx/text-q4_0.gguf" "$dir/x.gguf" q4_0 --awq "$dir/im.gguf" 2>&1 >/dev/null)
test $? -eq 2 || fail "--awq on a quantized model is not an error"
printf '%s' "$err" | grep -q 'AWQ needs the float model' || fail "--awq on q4_0: $err"
err=$("$q" "$fx/text-q4_0.gguf" "$dir/x.gguf" q4_0 --imatrix "$dir/im.gguf" -q 2>&1 >/dev/null) || fail "q4_0 -> q4_0"
printf '%s' "$err" | grep -q '14 matrices with an importance-matrix entry were already of their type' \
  || fail "re-quantizing to the same type: $err"

# JSONL: a chat completion with a data-URI image and an invoke body; then a malformed line.
img=$(base64 -w0 "$fx/images/img-128x96.png")
{
  printf '{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,%s"}},{"type":"text","text":"What colour is the largest shape in this image, and where is it?"}]}]}\n' "$img"
  printf '\n{"prompt":"Explain in two sentences why the sky looks blue on a clear summer afternoon."}\n'
} > "$dir/calib.jsonl"
out=$("$q" calibrate -m "$fx/text.gguf" --mmproj "$fx/mmproj.gguf" --data "$dir/calib.jsonl" -o "$dir/im2.gguf" -t 2) \
  || fail "calibrate (jsonl)"
printf '%s' "$out" | grep -q '^line 1 .*(80 image rows)' || fail "jsonl image line: $out"
printf '%s' "$out" | grep -q '^2 samples' || fail "jsonl summary: $out"
printf '{"prompt":"fine"}\n{"prompt": 3}\n' > "$dir/bad.jsonl"
err=$("$q" calibrate -m "$fx/text.gguf" --data "$dir/bad.jsonl" -o "$dir/x.gguf" 2>&1 >/dev/null)
rc=$?
test $rc -eq 2 || fail "bad jsonl: exit $rc"
printf '%s' "$err" | grep -q '^vlmd-quantize: error: .*bad.jsonl line 2: .*prompt' || fail "bad jsonl: $err"
err=$("$q" calibrate -m "$fx/text.gguf" --data "$dir/calib" -o "$dir/x.gguf" 2>&1 >/dev/null)
test $? -eq 2 || fail "image samples without --mmproj are not an error"
printf '%s' "$err" | grep -q '^vlmd-quantize: error: img-128x128.png: ' || fail "no mmproj: $err"
mkdir "$dir/empty"
"$q" calibrate -m "$fx/text.gguf" --data "$dir/empty" -o "$dir/x.gguf" 2>/dev/null
test $? -eq 2 || fail "an empty folder is not an error"

# eval: a model against itself is exact; Q4_0 is not.
out=$("$q" eval --ref "$fx/text.gguf" --test "$fx/text.gguf" --mmproj "$fx/mmproj.gguf" --data "$dir/calib" -t 2) \
  || fail "eval (same)"
printf '%s' "$out" | tail -1 | grep -q 'mean KL 0.000000 .*top-1 agreement 1.0000, logit NMSE 0.0000e+00' || fail "eval same: $out"
out=$("$q" eval --ref "$fx/text.gguf" --test "$dir/q4-im.gguf" --mmproj "$fx/mmproj.gguf" --data "$dir/calib" -t 2) \
  || fail "eval (q4_0)"
printf '%s' "$out" | tail -1 | grep -Eq 'mean KL 0\.0*[1-9]' || fail "eval q4_0 shows no divergence: $out"

# eval refuses models that make different prompts (another vocabulary), and a missing folder.
"$q" eval --ref "$fx/text.gguf" --test "$2/tiny-llava/text.gguf" --data "$dir/calib/text-only.txt" 2>/dev/null
test $? -eq 2 || fail "eval of two unrelated models is not an error"
"$q" eval --ref "$fx/text.gguf" --test "$fx/text.gguf" --data "$dir/nonexistent" 2>/dev/null
test $? -eq 2 || fail "eval without data is not an error"

# The pair: Q4_0 text, F16 vision (the fixture's mmproj matrices stay as they are); then Q8_0
# vision with its projector kept F16 by a vision override, and a text override.
out=$("$q" --text q4_0 --vision f16 -m "$fx/text.gguf" --mmproj "$fx/mmproj.gguf" -o "$dir/pair" -q -t 2) \
  || fail "--text --vision"
printf '%s' "$out" | grep -q "pair/text.gguf: 15 tensors quantized" || fail "pair text: $out"
printf '%s' "$out" | grep -q "pair/mmproj.gguf: 0 tensors quantized" || fail "pair vision: $out"
out=$("$q" --text q4_0 --vision q8_0 -m "$fx/text.gguf" --mmproj "$fx/mmproj.gguf" -o "$dir/pair8" -t 2 \
        --tensor-type 'ffn_down=q8_0' --vision-tensor-type '^mm\.=f16') || fail "--vision q8_0"
printf '%s' "$out" | grep -Eq '^blk\.0\.ffn_down\.weight .* f16 -> q8_0' || fail "text override: $out"
printf '%s' "$out" | grep -Eq '^v\.blk\.0\.ffn_down\.weight .* f16 -> q8_0' || fail "vision type: $out"
printf '%s' "$out" | grep -Eq '^v\.blk\.0\.attn_q\.weight .* f16 -> q8_0' || fail "vision type: $out"
printf '%s' "$out" | grep -Eq '^mm\..* f16 +kept' || fail "vision override: $out"
printf '%s' "$out" | grep -Eq '^blk\.0\.attn_q\.weight .* f16 -> q4_0' || fail "text type: $out"
"$q" --text q4_0 -m "$fx/text.gguf" -o "$dir/pair" 2>/dev/null
test $? -eq 2 || fail "--text without --vision and --mmproj is not an error"
echo "quantize_cli: ok"
