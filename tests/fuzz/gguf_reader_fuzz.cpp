// libFuzzer target: GgufFile::FromBytes on arbitrary bytes, then every getter on every key and the
// first and last byte of every tensor, so ASan sees any pointer the reader hands out; and the
// importance-matrix reader (GGUF and legacy layouts) on the same bytes.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "engine/gguf/gguf_reader.h"
#include "engine/gguf/imatrix.h"

namespace {

using vlmd::engine::gguf::ArrayElements;
using vlmd::engine::gguf::GgufFile;
using vlmd::engine::gguf::MetadataValue;

volatile uint64_t g_sink;  // keeps the reads below from being optimized away

void Touch(std::string_view s) {
  if (!s.empty()) g_sink = g_sink + static_cast<uint8_t>(s.front()) + static_cast<uint8_t>(s.back());
}

void Exercise(const GgufFile& f) {
  g_sink = g_sink + f.version() + f.alignment() + f.file_size() + f.data_offset();
  for (const auto& e : f.metadata()) {
    Touch(e.key);
    if (f.Find(e.key) != &e.value) __builtin_trap();  // keys are unique: lookup must agree
    (void)f.GetString(e.key);
    (void)f.GetU32(e.key);
    (void)f.GetI64(e.key);
    (void)f.GetF32(e.key);
    (void)f.GetBool(e.key);
    if (auto s = f.GetStringArray(e.key); s.ok()) {
      if (s->size() != e.value.array_count) __builtin_trap();
      for (std::string_view x : *s) Touch(x);
    }
    (void)f.GetF32Array(e.key);
    (void)f.GetI32Array(e.key);
    for (const MetadataValue& v : ArrayElements(e.value, 64)) Touch(v.str);
    Touch(e.value.str);
  }
  for (const auto& t : f.tensors()) {
    Touch(t.name);
    if (f.FindTensor(t.name) != &t) __builtin_trap();
    if (t.nbytes > 0) g_sink = g_sink + t.data[0] + t.data[t.nbytes - 1];
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = GgufFile::FromBytes(std::span<const uint8_t>(data, size));
  if (f.ok()) Exercise(**f);
  auto m = vlmd::engine::gguf::ParseImatrix(std::span<const uint8_t>(data, size));
  if (m.ok()) {
    for (const auto& [name, e] : m->entries) {
      const std::vector<float> imp = m->Importance(name);
      if (imp.size() != e.sum_sq.size()) __builtin_trap();
      for (float v : imp) {
        if (!(v >= 0)) __builtin_trap();  // finite and non-negative sums give such importances
      }
    }
  }
  return 0;
}
