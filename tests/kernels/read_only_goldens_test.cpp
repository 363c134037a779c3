// The formats vlmd reads but does not write (Q5_1, IQ4_NL, Q2_K, Q3_K, IQ4_XS) against ggml's own
// outputs for the same blocks (tests/data/quant/read_only_goldens.bin, README beside it): the
// dequantized values, the activations in the format's vec_dot_type and the reference dot, bit
// for bit. The other tests of these formats build their blocks from this code's reading of the
// layouts; these goldens are what pins that reading to ggml's.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "engine/kernels/kernel_table.h"
#include "engine/kernels/ref/vec_dot_ref.h"
#include "engine/tensor/quantize.h"
#include "test_util.h"

namespace vlmd::engine::kernels {
namespace {

struct Golden {
  DType type;
  uint32_t n = 0;
  std::vector<uint8_t> weights, act_bytes;
  std::vector<float> act, dequantized;
  float dot = 0;
};

std::vector<Golden> ReadGoldens() {
  const std::vector<uint8_t> file =
      vlmd::testing::ReadFileBytes(vlmd::testing::SourcePath("tests/data/quant/read_only_goldens.bin"));
  std::vector<Golden> out;
  size_t at = 0;
  auto take = [&](void* dst, size_t bytes) {
    if (at + bytes > file.size()) {
      ADD_FAILURE() << "the goldens file is truncated";
      return false;
    }
    std::memcpy(dst, file.data() + at, bytes);
    at += bytes;
    return true;
  };
  while (at < file.size()) {
    uint32_t head[4];
    if (!take(head, sizeof(head))) break;
    Golden g;
    g.type = static_cast<DType>(head[0]);
    g.n = head[1];
    g.weights.resize(head[2]);
    g.act_bytes.resize(head[3]);
    g.act.resize(g.n);
    g.dequantized.resize(g.n);
    if (!take(g.weights.data(), g.weights.size()) || !take(g.act.data(), g.n * 4) ||
        !take(g.act_bytes.data(), g.act_bytes.size()) || !take(g.dequantized.data(), g.n * 4) ||
        !take(&g.dot, 4)) {
      break;
    }
    out.push_back(std::move(g));
  }
  return out;
}

// The reference dot of a format on raw rows.
float RefDot(DType t, int64_t n, const void* x, const void* y) {
  using namespace ref;  // NOLINT(build/namespaces)
  switch (t) {
    case DType::kQ5_1: return VecDotQ5_1Q8_1(n, static_cast<const BlockQ5_1*>(x), static_cast<const BlockQ8_1*>(y));
    case DType::kIQ4_NL: return VecDotIQ4_NLQ8_0(n, static_cast<const BlockIQ4_NL*>(x), static_cast<const BlockQ8_0*>(y));
    case DType::kQ2_K: return VecDotQ2_KQ8_K(n, static_cast<const BlockQ2_K*>(x), static_cast<const BlockQ8_K*>(y));
    case DType::kQ3_K: return VecDotQ3_KQ8_K(n, static_cast<const BlockQ3_K*>(x), static_cast<const BlockQ8_K*>(y));
    case DType::kIQ4_XS: return VecDotIQ4_XSQ8_K(n, static_cast<const BlockIQ4_XS*>(x), static_cast<const BlockQ8_K*>(y));
    default: ADD_FAILURE() << "no reference dot for " << DTypeName(t); return 0;
  }
}

TEST(ReadOnlyGoldensTest, DequantizersActivationsAndDotsAreGgmls) {
  const std::vector<Golden> goldens = ReadGoldens();
  ASSERT_EQ(goldens.size(), 5u);
  const KernelTable& table = GetKernelTable(Isa::kRef);
  for (const Golden& g : goldens) {
    SCOPED_TRACE(std::string(DTypeName(g.type)));
    ASSERT_EQ(g.weights.size(), *RowBytes(g.type, g.n));
    std::vector<float> mine(g.n);
    ASSERT_TRUE(DequantizeRow(g.type, g.weights.data(), mine.data(), g.n).ok());
    EXPECT_EQ(std::memcmp(mine.data(), g.dequantized.data(), g.n * 4), 0) << "dequantized values differ";
    for (uint32_t i = 0; i < g.n; ++i) {
      if (std::memcmp(&mine[i], &g.dequantized[i], 4) != 0) {
        ADD_FAILURE() << "value " << i << ": " << mine[i] << ", ggml " << g.dequantized[i];
        break;
      }
    }
    const DType act = table.act_type[static_cast<size_t>(g.type)];
    ASSERT_EQ(g.act_bytes.size(), *RowBytes(act, g.n)) << "not ggml's vec_dot_type";
    std::vector<uint8_t> act_bytes(g.act_bytes.size());
    table.convert_act[static_cast<size_t>(act)](g.act.data(), act_bytes.data(), g.n);
    EXPECT_EQ(act_bytes, g.act_bytes) << "the activations in " << DTypeName(act) << " differ";
    const float dot = RefDot(g.type, g.n, g.weights.data(), g.act_bytes.data());
    EXPECT_EQ(std::memcmp(&dot, &g.dot, 4), 0) << "dot " << dot << ", ggml " << g.dot;
  }
}

}  // namespace
}  // namespace vlmd::engine::kernels
