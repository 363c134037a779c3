// The mixture-of-experts FFN against a scalar reference in double (router softmax, the top
// n_used, renormalized weights, SiLU-gated experts, weighted sum): f32 experts on the engine's
// table and the reference table, then Q8_0 experts packed (and fused) as the decoder packs
// them, on prompt rows (the tile unit where the CPU has one) and decode rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "engine/kernels/kernel_table.h"
#include "engine/models/moe_ffn.h"
#include "engine/models/weights.h"
#include "engine/ops/activation.h"
#include "engine/tensor/fp16.h"
#include "engine/tensor/quantize.h"

namespace vlmd::engine::models {
namespace {

constexpr int64_t kD = 64, kFf = 96, kExperts = 6, kUsed = 2, kRows = 7;

struct Experts {
  std::vector<float> router;          // [kExperts, kD]
  std::vector<float> gate, up, down;  // [kExperts * kFf, kD], same, [kExperts * kD, kFf]
};

Experts RandomExperts(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const auto fill = [&](std::vector<float>& v, int64_t n, float scale) {
    v.resize(static_cast<size_t>(n));
    for (float& x : v) x = g(rng) * scale;
  };
  Experts e;
  fill(e.router, kExperts * kD, 0.5f);
  fill(e.gate, kExperts * kFf * kD, 1.0f / std::sqrt(float{kD}));
  fill(e.up, kExperts * kFf * kD, 1.0f / std::sqrt(float{kD}));
  fill(e.down, kExperts * kD * kFf, 1.0f / std::sqrt(float{kFf}));
  return e;
}

// out[r] as moe_ffn.h defines it, in double.
std::vector<double> Reference(const Experts& e, const std::vector<float>& x) {
  std::vector<double> out(static_cast<size_t>(kRows * kD), 0.0);
  for (int64_t r = 0; r < kRows; ++r) {
    const float* xr = x.data() + r * kD;
    std::vector<double> p(kExperts);
    for (int64_t j = 0; j < kExperts; ++j) {
      for (int64_t i = 0; i < kD; ++i) p[j] += double{e.router[j * kD + i]} * xr[i];
    }
    const double mx = *std::max_element(p.begin(), p.end());
    double sum = 0.0;
    for (double& v : p) sum += (v = std::exp(v - mx));
    for (double& v : p) v /= sum;
    std::vector<int> ids(kExperts);
    std::iota(ids.begin(), ids.end(), 0);
    std::sort(ids.begin(), ids.end(), [&](int a, int b) { return p[a] > p[b]; });
    double chosen_sum = 0.0;
    for (int j = 0; j < kUsed; ++j) chosen_sum += p[ids[j]];
    for (int j = 0; j < kUsed; ++j) {
      const int ex = ids[j];
      std::vector<double> h(kFf);
      for (int64_t f = 0; f < kFf; ++f) {
        double gv = 0.0, uv = 0.0;
        for (int64_t i = 0; i < kD; ++i) {
          gv += double{e.gate[(ex * kFf + f) * kD + i]} * xr[i];
          uv += double{e.up[(ex * kFf + f) * kD + i]} * xr[i];
        }
        h[f] = gv / (1.0 + std::exp(-gv)) * uv;
      }
      for (int64_t o = 0; o < kD; ++o) {
        double y = 0.0;
        for (int64_t f = 0; f < kFf; ++f) y += double{e.down[(ex * kD + o) * kFf + f]} * h[f];
        out[static_cast<size_t>(r * kD + o)] += p[ex] / chosen_sum * y;
      }
    }
  }
  return out;
}

std::vector<float> RandomRows(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(kRows * kD));
  for (float& v : x) v = g(rng);
  return x;
}

ops::WeightView View(DType type, const void* data, int64_t n, int64_t k) {
  return ops::WeightView{.dtype = type, .n = n, .k = k, .data = data,
                         .row_bytes = static_cast<size_t>(*RowBytes(type, k))};
}

// MoeWeights over the matrices as the decoder slices them (RowsOf an all-experts view).
MoeWeights Slice(const ops::WeightView& router, const ops::WeightView& gate,
                 const ops::WeightView& up, const ops::WeightView& down) {
  MoeWeights w;
  w.router = router;
  w.n_used = kUsed;
  w.d_ff = kFf;
  for (int64_t e = 0; e < kExperts; ++e) {
    w.gate.push_back(RowsOf(gate, e * kFf, kFf));
    w.up.push_back(RowsOf(up, e * kFf, kFf));
    w.down.push_back(RowsOf(down, e * kD, kD));
    w.gate_up.push_back(ops::WeightView{});  // not fused
  }
  return w;
}

double MaxAbs(const std::vector<double>& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

void ExpectNear(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol) << "element " << i << " (row " << i / kD << ")";
  }
}

// The reference table and the engine's (VLMD_FORCE_ISA's when set).
std::vector<kernels::Isa> Tables() {
  std::vector<kernels::Isa> isas = {kernels::Isa::kRef};
  const auto selected = kernels::SelectIsa();
  if (selected.ok() && *selected != kernels::Isa::kRef) isas.push_back(*selected);
  return isas;
}

TEST(MoeFeedForward, F32ExpertsMatchTheReference) {
  const Experts e = RandomExperts(1);
  const std::vector<float> x = RandomRows(2);
  const std::vector<double> want = Reference(e, x);
  ASSERT_GT(MaxAbs(want), 0.1);  // the outputs are not trivially zero
  const MoeWeights w = Slice(View(DType::kF32, e.router.data(), kExperts, kD),
                             View(DType::kF32, e.gate.data(), kExperts * kFf, kD),
                             View(DType::kF32, e.up.data(), kExperts * kFf, kD),
                             View(DType::kF32, e.down.data(), kExperts * kD, kFf));
  ThreadPool pool(2);
  for (kernels::Isa isa : Tables()) {
    SCOPED_TRACE(std::string(kernels::IsaName(isa)));
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      MoeScratch s;
      ops::MatmulScratch mm;
      std::vector<float> out(static_cast<size_t>(kRows * kD), std::nanf(""));
      ASSERT_TRUE(MoeFeedForward(kernels::GetKernelTable(isa), p, w, x.data(), kRows, kD, false, &s,
                                 &mm, out.data())
                      .ok());
      ExpectNear(out, want, 1e-4 * MaxAbs(want));
      // Every row chose kUsed distinct experts, most probable first, weights summing to 1.
      for (int64_t r = 0; r < kRows; ++r) {
        EXPECT_NE(s.chosen[r * kUsed], s.chosen[r * kUsed + 1]);
        EXPECT_GE(s.weight[r * kUsed], s.weight[r * kUsed + 1]);
        EXPECT_NEAR(s.weight[r * kUsed] + s.weight[r * kUsed + 1], 1.0f, 1e-6f);
      }
    }
  }
}

// Q8_0 experts packed as TextDecoder::LoadExperts packs them (gate and up fused), in the fast
// precision: prompt rows (the tile unit's bf16 where the CPU has it) and decode rows (int8
// activations) both within the quantizations' error of the f32 reference.
TEST(MoeFeedForward, PackedQ8ExpertsMatchTheReference) {
  const auto selected = kernels::SelectIsa();
  ASSERT_TRUE(selected.ok());
  const kernels::Isa isa = *selected;
  const kernels::KernelTable& kt = kernels::GetKernelTable(isa);
  if (kt.packed_matmul == nullptr) GTEST_SKIP() << "no packed int8 kernel on this CPU";
  const Experts e = RandomExperts(3);
  const std::vector<float> x = RandomRows(4);
  const std::vector<double> want = Reference(e, x);
  const auto quantize = [](const std::vector<float>& v, int64_t k) {
    const size_t rb = static_cast<size_t>(*RowBytes(DType::kQ8_0, k));
    const int64_t rows = static_cast<int64_t>(v.size()) / k;
    std::vector<uint8_t> q(rb * static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      EXPECT_TRUE(QuantizeRow(DType::kQ8_0, v.data() + r * k, q.data() + r * rb, k).ok());
    }
    return q;
  };
  const std::vector<uint8_t> gate = quantize(e.gate, kD), up = quantize(e.up, kD),
                             down = quantize(e.down, kFf);
  MoeWeights w = Slice(View(DType::kF32, e.router.data(), kExperts, kD),
                       View(DType::kQ8_0, gate.data(), kExperts * kFf, kD),
                       View(DType::kQ8_0, up.data(), kExperts * kFf, kD),
                       View(DType::kQ8_0, down.data(), kExperts * kD, kFf));
  ThreadPool pool(2);
  const ops::WeightPacking packing{.kt = &kt, .precision = ops::Precision::kFast, .pool = &pool};
  ops::PackedStore store;
  for (int64_t ex = 0; ex < kExperts; ++ex) {
    const ops::WeightView* parts[] = {&w.gate[ex], &w.up[ex]};
    auto fused = ops::PackFusedWeights(packing, parts, &store);
    ASSERT_TRUE(fused.ok());
    ASSERT_NE(fused->packed, nullptr);
    w.gate_up[ex] = *fused;
    ASSERT_TRUE(ops::PackWeight(packing, &w.down[ex], &store).ok());
    ASSERT_NE(w.down[ex].packed, nullptr);
  }
  for (bool prompt : {true, false}) {
    SCOPED_TRACE(prompt ? "prompt rows" : "decode rows");
    MoeScratch s;
    ops::MatmulScratch mm;
    std::vector<float> out(static_cast<size_t>(kRows * kD), std::nanf(""));
    ASSERT_TRUE(MoeFeedForward(kt, &pool, w, x.data(), kRows, kD, prompt, &s, &mm, out.data()).ok());
    ExpectNear(out, want, 3e-2 * MaxAbs(want));
  }
}

// Equal experts, one used per row: every row's output is the dense FFN's, bit for bit, on the
// packed path the decoder runs (gate and up fused) for prompt and decode rows.
TEST(MoeFeedForward, OneOfEqualExpertsIsTheDenseFfn) {
  const auto selected = kernels::SelectIsa();
  ASSERT_TRUE(selected.ok());
  const kernels::KernelTable& kt = kernels::GetKernelTable(*selected);
  const Experts e = RandomExperts(9);
  const std::vector<float> x = RandomRows(10);
  // Expert 0's matrices copied to every expert, as f16.
  const auto stack_f16 = [](const std::vector<float>& v, int64_t per_expert) {
    std::vector<uint16_t> out(static_cast<size_t>(per_expert * kExperts));
    for (int64_t ex = 0; ex < kExperts; ++ex) {
      for (int64_t i = 0; i < per_expert; ++i) out[static_cast<size_t>(ex * per_expert + i)] = F32ToF16(v[static_cast<size_t>(i)]);
    }
    return out;
  };
  const std::vector<uint16_t> gate = stack_f16(e.gate, kFf * kD), up = stack_f16(e.up, kFf * kD),
                              down = stack_f16(e.down, kD * kFf);
  ThreadPool pool(2);
  const ops::WeightPacking packing{.kt = &kt, .precision = ops::Precision::kFast, .pool = &pool};
  ops::PackedStore store;
  MoeWeights w = Slice(View(DType::kF32, e.router.data(), kExperts, kD),
                       View(DType::kF16, gate.data(), kExperts * kFf, kD),
                       View(DType::kF16, up.data(), kExperts * kFf, kD),
                       View(DType::kF16, down.data(), kExperts * kD, kFf));
  w.n_used = 1;
  for (int64_t ex = 0; ex < kExperts; ++ex) {
    const ops::WeightView* parts[] = {&w.gate[ex], &w.up[ex]};
    auto fused = ops::PackFusedWeights(packing, parts, &store);
    ASSERT_TRUE(fused.ok());
    w.gate_up[ex] = *fused;
    ASSERT_TRUE(ops::PackWeight(packing, &w.down[ex], &store).ok());
  }
  // The dense FFN of expert 0's matrices, packed the same way.
  ops::WeightView dg = View(DType::kF16, gate.data(), kFf, kD), du = View(DType::kF16, up.data(), kFf, kD),
                  dd = View(DType::kF16, down.data(), kD, kFf);
  const ops::WeightView* dparts[] = {&dg, &du};
  auto dense_gate_up = ops::PackFusedWeights(packing, dparts, &store);
  ASSERT_TRUE(dense_gate_up.ok());
  ASSERT_TRUE(ops::PackWeight(packing, &dd, &store).ok());
  for (bool prompt : {true, false}) {
    SCOPED_TRACE(prompt ? "prompt rows" : "decode rows");
    for (int64_t rows : {int64_t{1}, kRows}) {
      SCOPED_TRACE(rows);
      ops::MatmulScratch mm;
      std::vector<float> gu(static_cast<size_t>(rows * 2 * kFf)), h(static_cast<size_t>(rows * kFf)),
          want(static_cast<size_t>(rows * kD));
      if (dense_gate_up->packed != nullptr) {
        ASSERT_TRUE(ops::MatMul(kt, &pool, ops::RouteForRows(*dense_gate_up, prompt), x.data(),
                                rows, kD, gu.data(), 2 * kFf, &mm).ok());
      } else {
        ASSERT_TRUE(ops::MatMul(kt, &pool, ops::RouteForRows(dg, prompt), x.data(), rows, kD,
                                gu.data(), 2 * kFf, &mm).ok());
        ASSERT_TRUE(ops::MatMul(kt, &pool, ops::RouteForRows(du, prompt), x.data(), rows, kD,
                                gu.data() + kFf, 2 * kFf, &mm).ok());
      }
      ASSERT_TRUE(ops::SwiGluRows(kt, &pool, gu.data(), rows, kFf, h.data()).ok());
      ASSERT_TRUE(ops::MatMul(kt, &pool, ops::RouteForRows(dd, prompt), h.data(), rows, kFf,
                              want.data(), kD, &mm).ok());
      MoeScratch s;
      std::vector<float> out(static_cast<size_t>(rows * kD), std::nanf(""));
      ASSERT_TRUE(MoeFeedForward(kt, &pool, w, x.data(), rows, kD, prompt, &s, &mm, out.data()).ok());
      EXPECT_EQ(out, want);
    }
  }
}

// A row with a non-finite input (so non-finite router logits) gets a NaN output row, which the
// caller's logit check then fails alone; the other rows are as if it were not there.
TEST(MoeFeedForward, ANonFiniteRowGivesANanRowAndLeavesTheOthers) {
  const Experts e = RandomExperts(5);
  std::vector<float> x = RandomRows(6);
  const std::vector<double> want = Reference(e, x);
  x[3 * kD + 5] = std::numeric_limits<float>::infinity();
  const MoeWeights w = Slice(View(DType::kF32, e.router.data(), kExperts, kD),
                             View(DType::kF32, e.gate.data(), kExperts * kFf, kD),
                             View(DType::kF32, e.up.data(), kExperts * kFf, kD),
                             View(DType::kF32, e.down.data(), kExperts * kD, kFf));
  ThreadPool pool(2);
  for (bool prompt : {true, false}) {
    MoeScratch s;
    ops::MatmulScratch mm;
    std::vector<float> out(static_cast<size_t>(kRows * kD));
    ASSERT_TRUE(MoeFeedForward(kernels::GetKernelTable(kernels::Isa::kRef), &pool, w, x.data(), kRows,
                               kD, prompt, &s, &mm, out.data())
                    .ok());
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t i = 0; i < kD; ++i) {
        const float v = out[static_cast<size_t>(r * kD + i)];
        if (r == 3) {
          ASSERT_TRUE(std::isnan(v)) << "column " << i;
        } else {
          ASSERT_NEAR(v, want[static_cast<size_t>(r * kD + i)], 1e-4 * MaxAbs(want)) << r << " " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace vlmd::engine::models
