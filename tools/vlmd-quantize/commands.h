// The vlmd-quantize commands: main.cpp picks one by its first argument and hands it the rest;
// each returns the process exit code (0 ok, 2 error with one "vlmd-quantize: error: ..." line;
// CLI11 usage errors keep CLI11's codes).
#pragma once

namespace vlmd::tools::quantize {

// vlmd-quantize IN OUT TYPE [--imatrix F] [--awq F [--awq-alpha A]] [--tensor-type P=T ...], or
// vlmd-quantize --text TYPE --vision TYPE -m TEXT --mmproj MMPROJ -o DIR [the same options]
// [--vision-tensor-type P=T ...]
int RunQuantize(int argc, char** argv);
// vlmd-quantize calibrate -m TEXT --mmproj MMPROJ --data DIR|FILE.jsonl -o imatrix.gguf
int RunCalibrate(int argc, char** argv);
// vlmd-quantize eval --ref REF.gguf --test TEST.gguf [--mmproj ...] --data DIR|FILE.jsonl
int RunEval(int argc, char** argv);

}  // namespace vlmd::tools::quantize
