// Activation (GELU tanh/erf/quick, SiLU, SwiGLU) and RoPE kernels: every ISA table against the
// ref table with tolerances from rounding-error bounds, and the ref table against independent
// double-precision formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <functional>
#include <string>
#include <vector>

#include "engine/kernels/kernel_table.h"
#include "kernels/op_test_util.h"

namespace vlmd::testing {
namespace {

using engine::kernels::GetKernelTable;
using engine::kernels::Isa;
using engine::kernels::IsaName;
using engine::kernels::KernelTable;
using engine::kernels::UnaryFn;

const int64_t kLengths[] = {1, 7, 33, 1000, 4097};

// Normal(0, 3) data with the saturating and far-tail values planted where n allows.
std::vector<float> ActivationInputs(int64_t n, uint32_t seed) {
  auto x = RandomNormal(n, seed, 3.0f);
  const float specials[] = {0.0f, -0.0f, 20.0f, -20.0f, -6.0f, 90.0f, -90.0f, 100.0f,
                            -100.0f, 1000.0f, -1000.0f, 1e20f, -1e20f, 5e-39f, -5e-39f};
  for (size_t i = 0; i < std::size(specials) && static_cast<int64_t>(2 * i + 1) < n; ++i) {
    x[2 * i + 1] = specials[i];  // odd slots: some land in the SIMD tail for n = 33
  }
  return x;
}

// Tolerance of x * sigmoid(k x) evaluated as x / (1 + exp(t)), t = -k x, when t carries a
// relative error of t_rel_u units of u: exp then errs by (t_rel_u |t| + 2) u (Exp is 1 ulp) and
// the quotient depends on it with weight e / (1 + e). The SIMD kernels form it as x * num / (1 + z)
// with z = exp(-|t|) (the same weight) and a Newton-refined reciprocal: 1 +, the reciprocal (1u
// plus its estimate's < 2^-28), two products and the ref's rounding add 5u.
// Past t = ln(FLT_MAX) exp(t) overflows to inf in f32 and the result flushes to zero, an error
// of at most |want| < |x| / FLT_MAX (below 1e-35 for the inputs used).
double XSigmoidTol(double x, double k, double t_rel_u, double want) {
  const double t = -k * x;
  const double e = std::exp(t);
  const double w = std::isinf(e) ? 1.0 : e / (1.0 + e);
  const double overflow = t > std::log(3.4028234663852886e38) * (1 - 8 * kU) ? std::fabs(want) : 0;
  return ((t_rel_u * std::fabs(t) + 2) * w + 5) * kU * std::fabs(want) + overflow + kTiny;
}

struct ActivationCase {
  const char* name;
  UnaryFn KernelTable::*slot;
  std::function<double(double x, double want)> tol;  // |got - want| bound for input x
};

const double kSqrt2OverPi = 0.79788456080286535588;

std::vector<ActivationCase> ActivationCases() {
  return {
      // t = -x: exact.
      {"silu", &KernelTable::silu, [](double x, double w) { return XSigmoidTol(x, 1, 0, w); }},
      // t = -1.702f x: the constant's representation and the product, 2u.
      {"gelu_quick", &KernelTable::gelu_quick,
       [](double x, double w) { return XSigmoidTol(x, 1.702, 2, w); }},
      // t = -2 sqrt(2/pi) x (1 + 0.044715 x^2): x^2, fma with the rounded 0.044715f, x *, the
      // rounded constant and its product: 6u.
      {"gelu_tanh", &KernelTable::gelu_tanh,
       [](double x, double w) {
         return XSigmoidTol(x, 2 * kSqrt2OverPi * (1 + 0.044715 * x * x), 6, w);
       }},
      // x * Phi(x), Phi from erfc(z), z = |x|/sqrt2, with the erfc fit's 1.2e-7 relative error;
      // z^2 in the exponent is rounded ~3 times (3 z^2 u), the degree-9 polynomial and the other
      // steps add < 25u; then 1 - erfc/2 for x >= 0 and the products: 3u of the result.
      {"gelu_erf", &KernelTable::gelu_erf,
       [](double x, double w) {
         const double z = std::fabs(x) / std::sqrt(2.0);
         const double half_erfc = 0.5 * std::erfc(z);
         return std::fabs(x) * half_erfc * (1.2e-7 + (3 * z * z + 25) * kU) +
                3 * kU * std::fabs(w) + kTiny;
       }},
  };
}

TEST(OpKernels, ActivationsMatchRef) {
  const KernelTable& ref = GetKernelTable(Isa::kRef);
  for (const ActivationCase& c : ActivationCases()) {
    for (Isa isa : AvailableIsas()) {
      const KernelTable& t = GetKernelTable(isa);
      for (int64_t n : kLengths) {
        const auto x = ActivationInputs(n, 61 + n);
        std::vector<float> want(n), got(n);
        (ref.*c.slot)(x.data(), want.data(), n);
        (t.*c.slot)(x.data(), got.data(), n);
        int failures = 0;
        for (int64_t i = 0; i < n && failures < 5; ++i) {
          const double tol = c.tol(x[i], want[i]);
          const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
          if (!(err <= tol)) {
            ADD_FAILURE() << c.name << " isa=" << IsaName(isa) << " n=" << n << " i=" << i
                          << " x=" << x[i] << " got=" << got[i] << " want=" << want[i]
                          << " err=" << err << " tol=" << tol;
            ++failures;
          }
        }
        std::vector<float> inplace = x;
        (t.*c.slot)(inplace.data(), inplace.data(), n);
        EXPECT_EQ(inplace, got) << c.name << " in place isa=" << IsaName(isa) << " n=" << n;
      }
    }
  }
}

TEST(OpKernels, SwiGluMatchesRef) {
  const KernelTable& ref = GetKernelTable(Isa::kRef);
  for (Isa isa : AvailableIsas()) {
    const KernelTable& t = GetKernelTable(isa);
    for (int64_t n : kLengths) {
      const auto a = ActivationInputs(n, 71 + n);
      const auto b = RandomNormal(n, 72 + n, 2.0f);
      std::vector<float> want(n), got(n);
      ref.swiglu(a.data(), b.data(), want.data(), n);
      t.swiglu(a.data(), b.data(), got.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        // silu(a) as above, one more rounding for * b.
        const double tol = XSigmoidTol(a[i], 1, 0, want[i]) + kU * std::fabs(want[i]);
        ASSERT_NEAR(got[i], want[i], tol)
            << "swiglu isa=" << IsaName(isa) << " n=" << n << " i=" << i << " a=" << a[i]
            << " b=" << b[i];
      }
      std::vector<float> in_a = a, in_b = b;  // the output may replace either input
      t.swiglu(in_a.data(), b.data(), in_a.data(), n);
      t.swiglu(a.data(), in_b.data(), in_b.data(), n);
      EXPECT_EQ(in_a, got) << "swiglu y=a isa=" << IsaName(isa) << " n=" << n;
      EXPECT_EQ(in_b, got) << "swiglu y=b isa=" << IsaName(isa) << " n=" << n;
    }
  }
}

// f32 -> f16 -> f32 rounding: every ISA bit-equal to the reference (ties to even, f16
// subnormals, overflow to inf, NaN stays NaN), in place and out of place.
TEST(OpKernels, RoundF16IsBitExact) {
  std::vector<float> x = RandomNormal(1000, 5, 100.0f);
  const float specials[] = {0.0f, -0.0f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048,  // ties
                            65504.0f, 65520.0f, -70000.0f, 6e-8f, 3e-8f, 1e-5f, -2.98e-8f,
                            std::numeric_limits<float>::infinity(), 1e-40f};
  for (size_t i = 0; i < std::size(specials); ++i) x[i * 7] = specials[i];
  x[999] = std::numeric_limits<float>::quiet_NaN();
  const KernelTable& ref = GetKernelTable(Isa::kRef);
  std::vector<float> want(x.size());
  ref.round_f16(x.data(), want.data(), static_cast<int64_t>(x.size()));
  EXPECT_EQ(want[7 * 2], 1.0f);                  // tie to even
  EXPECT_EQ(want[7 * 3], 1.0f + 4.0f / 2048);    // tie to even, upwards
  EXPECT_TRUE(std::isinf(want[7 * 5]));          // 65520 overflows
  for (Isa isa : AvailableIsas()) {
    for (int64_t n : kLengths) {
      if (n > static_cast<int64_t>(x.size())) continue;
      std::vector<float> got(n), in_place(x.begin(), x.begin() + n);
      GetKernelTable(isa).round_f16(x.data(), got.data(), n);
      GetKernelTable(isa).round_f16(in_place.data(), in_place.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0)
            << IsaName(isa) << " n=" << n << " x=" << x[i] << " got " << got[i] << " want " << want[i];
        ASSERT_EQ(std::memcmp(&in_place[i], &want[i], 4), 0) << IsaName(isa) << " in place";
      }
    }
  }
}

// Independent double formulas: sigmoid(v) = (1 + tanh(v/2)) / 2, GELU with erf and tanh in their
// textbook forms. 1 + tanh and 1 + erf cancel for negative inputs, losing up to 2^-53 absolute,
// hence the |x| 2^-52 term.
TEST(OpKernelsRef, ActivationsMatchDoubleFormulas) {
  const KernelTable& ref = GetKernelTable(Isa::kRef);
  auto sigm = [](double v) { return 0.5 * (1.0 + std::tanh(0.5 * v)); };
  const int64_t n = 4097;
  const auto x = ActivationInputs(n, 81);
  const auto b = RandomNormal(n, 82);
  std::vector<float> silu(n), quick(n), gtanh(n), gerf(n), swiglu(n);
  ref.silu(x.data(), silu.data(), n);
  ref.gelu_quick(x.data(), quick.data(), n);
  ref.gelu_tanh(x.data(), gtanh.data(), n);
  ref.gelu_erf(x.data(), gerf.data(), n);
  ref.swiglu(x.data(), b.data(), swiglu.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    const double want[] = {
        v * sigm(v),
        v * sigm(1.702 * v),
        0.5 * v * (1.0 + std::tanh(kSqrt2OverPi * (v + 0.044715 * v * v * v))),
        0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))),
        v * sigm(v) * b[i],
    };
    const float got[] = {silu[i], quick[i], gtanh[i], gerf[i], swiglu[i]};
    const char* names[] = {"silu", "gelu_quick", "gelu_tanh", "gelu_erf", "swiglu"};
    for (int k = 0; k < 5; ++k) {
      const double scale = k == 4 ? std::fabs(b[i]) : 1.0;
      const double tol = 2 * kU * std::fabs(want[k]) + std::fabs(v) * scale * 0x1p-52 + kTiny;
      EXPECT_NEAR(got[k], want[k], tol) << names[k] << " x=" << v << " i=" << i;
    }
  }
}

// Rope: heads with a gap between them (head_stride > head_dim) so that writes outside the
// rotated range would show; every n_rot from the smallest pair to a full head, across the SIMD
// tail boundaries of 8 and 16 lanes.
TEST(OpKernels, RopeMatchesRefAndLeavesTheRestAlone) {
  const KernelTable& ref = GetKernelTable(Isa::kRef);
  const int64_t head_dim = 80, head_stride = 85, n_heads = 3;
  for (Isa isa : AvailableIsas()) {
    const KernelTable& t = GetKernelTable(isa);
    for (int64_t n_rot : std::vector<int64_t>{2, 6, 16, 34, 64, head_dim}) {
      for (bool neox : {false, true}) {
        const auto x = RandomNormal(n_heads * head_stride, 91 + n_rot, 2.0f);
        const auto angles = RandomUniform(n_rot / 2, 92 + n_rot, -3.2f, 3.2f);
        std::vector<float> cos_sin(n_rot);
        for (int64_t i = 0; i < n_rot / 2; ++i) {
          cos_sin[i] = std::cos(angles[i]);
          cos_sin[n_rot / 2 + i] = std::sin(angles[i]);
        }
        std::vector<float> want = x, got = x;
        ref.rope(want.data(), n_heads, head_stride, cos_sin.data(), n_rot, neox);
        t.rope(got.data(), n_heads, head_stride, cos_sin.data(), n_rot, neox);
        const std::string vars = std::string("rope isa=") + std::string(IsaName(isa)) +
                                 " n_rot=" + std::to_string(n_rot) + (neox ? " neox" : " normal");
        for (int64_t h = 0; h < n_heads; ++h) {
          const int64_t base = h * head_stride;
          for (int64_t i = 0; i < n_rot / 2; ++i) {
            const int64_t i0 = base + (neox ? i : 2 * i);
            const int64_t i1 = base + (neox ? i + n_rot / 2 : 2 * i + 1);
            // Two products and a sum (or an fma), against the ref's single rounding.
            const double tol = 3 * kU * (std::fabs(x[i0]) + std::fabs(x[i1]));
            ASSERT_NEAR(got[i0], want[i0], tol) << vars << " h=" << h << " pair=" << i;
            ASSERT_NEAR(got[i1], want[i1], tol) << vars << " h=" << h << " pair=" << i;
          }
          for (int64_t j = n_rot; j < head_stride && base + j < n_heads * head_stride; ++j) {
            ASSERT_EQ(got[base + j], x[base + j]) << vars << " untouched h=" << h << " j=" << j;
          }
        }
        // The ref rotation itself against the definition in double.
        for (int64_t h = 0; h < n_heads; ++h) {
          for (int64_t i = 0; i < n_rot / 2; ++i) {
            const int64_t i0 = h * head_stride + (neox ? i : 2 * i);
            const int64_t i1 = h * head_stride + (neox ? i + n_rot / 2 : 2 * i + 1);
            const double c = cos_sin[i], s = cos_sin[n_rot / 2 + i];
            const double y0 = double(x[i0]) * c - double(x[i1]) * s;
            const double y1 = double(x[i0]) * s + double(x[i1]) * c;
            ASSERT_NEAR(want[i0], y0, kU * std::fabs(y0) + kTiny) << vars;
            ASSERT_NEAR(want[i1], y1, kU * std::fabs(y1) + kTiny) << vars;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace vlmd::testing
