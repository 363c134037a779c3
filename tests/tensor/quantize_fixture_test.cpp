// The strongest oracle for the weight quantizers: the fixtures' text-{q8_0,q4_0,q4_k}.gguf were
// written by llama.cpp's llama-quantize --pure from text.gguf, so quantizing each base tensor
// (F16/F32) with our QuantizeTensor must reproduce the quantized file's bytes exactly.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "engine/gguf/gguf_reader.h"
#include "engine/tensor/dtype.h"
#include "engine/tensor/quantize.h"
#include "test_util.h"

namespace vlmd::engine {
namespace {

using gguf::GgufFile;
using gguf::TensorInfo;

// f32 copy of a base tensor (F32, F16 or BF16), row-major as stored.
std::vector<float> ToF32(const TensorInfo& t) {
  std::vector<float> out(static_cast<size_t>(t.n_elements()));
  const DequantizeRowFn fn = FindDequantizeRowFn(t.type);
  EXPECT_NE(fn, nullptr) << DTypeName(t.type);
  if (fn != nullptr) fn(t.data, out.data(), t.n_elements());
  return out;
}

struct Outcome {
  int tensors = 0;
  int mismatched = 0;
};

// Quantizes every quantized tensor of `variant` from its base tensor; counts per type.
void CheckVariant(const std::string& fixture, const std::string& variant,
                  std::map<DType, Outcome>* per_type) {
  auto base = GgufFile::Open(vlmd::testing::FixturePath(fixture + "/text.gguf"));
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  auto quant = GgufFile::Open(vlmd::testing::FixturePath(fixture + "/" + variant));
  ASSERT_TRUE(quant.ok()) << quant.status().ToString();
  for (const TensorInfo& q : (*quant)->tensors()) {
    if (!GetDTypeTraits(q.type).quantized) continue;
    const TensorInfo* b = (*base)->FindTensor(q.name);
    ASSERT_NE(b, nullptr) << q.name;
    ASSERT_EQ(b->n_elements(), q.n_elements()) << q.name;
    const int64_t row_len = q.ne[0];
    const int64_t n_rows = q.n_elements() / row_len;
    const std::vector<float> src = ToF32(*b);
    std::vector<uint8_t> ours(q.nbytes);
    auto written = QuantizeTensor(q.type, src.data(), n_rows, row_len, ours.data());
    ASSERT_TRUE(written.ok()) << q.name << ": " << written.status().ToString();
    ASSERT_EQ(*written, q.nbytes) << q.name;
    Outcome& o = (*per_type)[q.type];
    ++o.tensors;
    if (std::memcmp(ours.data(), q.data, q.nbytes) != 0) {
      ++o.mismatched;
      const int block_bytes = GetDTypeTraits(q.type).block_bytes;
      int64_t first = -1, n_diff_blocks = 0;
      for (uint64_t blk = 0; blk < q.nbytes / block_bytes; ++blk) {
        if (std::memcmp(ours.data() + blk * block_bytes, q.data + blk * block_bytes,
                        block_bytes) != 0) {
          if (first < 0) first = static_cast<int64_t>(blk);
          ++n_diff_blocks;
        }
      }
      ADD_FAILURE() << fixture << "/" << variant << " " << q.name << " (" << DTypeName(q.type)
                    << "): " << n_diff_blocks << " of " << q.nbytes / block_bytes
                    << " blocks differ, first at block " << first;
    }
  }
}

TEST(QuantizeFixtureTest, ReproducesLlamaQuantizeBytes) {
  std::map<DType, Outcome> per_type;
  for (const char* fixture : {"tiny-llava", "tiny-smolvlm"}) {
    for (const char* variant : {"text-q8_0.gguf", "text-q4_0.gguf", "text-q4_k.gguf"}) {
      SCOPED_TRACE(std::string(fixture) + "/" + variant);
      CheckVariant(fixture, variant, &per_type);
    }
  }
  // The fixtures cover these four weight types (README: q4_k files hold Q4_K ffn_down and Q5_0
  // elsewhere); a missing type would mean this oracle silently checks less than it claims.
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ5_0, DType::kQ4_K}) {
    EXPECT_GT(per_type[t].tensors, 0) << DTypeName(t);
    EXPECT_EQ(per_type[t].mismatched, 0) << DTypeName(t);
  }
}

}  // namespace
}  // namespace vlmd::engine
