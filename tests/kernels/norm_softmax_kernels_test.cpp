// RMSNorm, LayerNorm, softmax and exp_sub_sum kernels: every ISA table against the ref table
// with tolerances from first-order rounding-error bounds, and the ref table against
// double-precision formulas.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
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

const int64_t kLengths[] = {1, 7, 33, 1000, 4097};

// Reports up to 5 elements with |got - want| > tol (or NaN mismatch), with the case variables.
void ExpectClose(const std::string& vars, const std::vector<float>& got,
                 const std::vector<float>& want, const std::vector<double>& tol) {
  ASSERT_EQ(got.size(), want.size()) << vars;
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 5; ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (std::isnan(got[i]) != std::isnan(want[i]) || err > tol[i]) {
      ADD_FAILURE() << vars << " i=" << i << " got=" << got[i] << " want=" << want[i]
                    << " err=" << err << " tol=" << tol[i];
      ++failures;
    }
  }
}

std::string Vars(const char* op, Isa isa, int64_t n, const char* extra = "") {
  return std::string(op) + " isa=" + std::string(IsaName(isa)) + " n=" + std::to_string(n) +
         extra;
}

TEST(OpKernelTables, EverySlotFilledAndHighwayInstalled) {
  const KernelTable& ref = GetKernelTable(Isa::kRef);
  for (Isa isa : AvailableIsas()) {
    const KernelTable& t = GetKernelTable(isa);
    SCOPED_TRACE(std::string(IsaName(isa)));
    EXPECT_NE(t.rms_norm, nullptr);
    EXPECT_NE(t.layer_norm, nullptr);
    EXPECT_NE(t.softmax, nullptr);
    EXPECT_NE(t.gelu_tanh, nullptr);
    EXPECT_NE(t.gelu_erf, nullptr);
    EXPECT_NE(t.gelu_quick, nullptr);
    EXPECT_NE(t.silu, nullptr);
    EXPECT_NE(t.swiglu, nullptr);
    EXPECT_NE(t.rope, nullptr);
    EXPECT_NE(t.exp_sub_sum, nullptr);
    EXPECT_NE(t.dot_rows_f32, nullptr);
    EXPECT_NE(t.dot_rows_f16, nullptr);
    EXPECT_NE(t.axpy_rows_f32, nullptr);
    EXPECT_NE(t.axpy_rows_f16, nullptr);
    if (isa != Isa::kRef) {
      // The Highway filler of this ISA ran: otherwise the slot would still be the ref kernel.
      EXPECT_NE(t.rms_norm, ref.rms_norm);
      EXPECT_NE(t.gelu_erf, ref.gelu_erf);
      EXPECT_NE(t.dot_rows_f16, ref.dot_rows_f16);
    }
  }
  if (engine::kernels::IsaAvailable(Isa::kAvx512)) {
    // AVX2 and AVX3 are distinct Highway targets, so both were compiled.
    EXPECT_NE(GetKernelTable(Isa::kAvx512).softmax, GetKernelTable(Isa::kAvx2).softmax);
    EXPECT_EQ(GetKernelTable(Isa::kAvx512Vnni).softmax, GetKernelTable(Isa::kAvx512).softmax);
  }
}

TEST(OpKernels, RmsNormMatchesRef) {
  const KernelTable& ref = GetKernelTable(Isa::kRef);
  for (Isa isa : AvailableIsas()) {
    const KernelTable& t = GetKernelTable(isa);
    for (int64_t n : kLengths) {
      for (bool with_weight : {false, true}) {
        const auto x = RandomNormal(n, 11 + n, 2.0f, 0.5f);
        const auto w = RandomNormal(n, 12 + n, 1.0f, 1.0f);
        const float* wp = with_weight ? w.data() : nullptr;
        const float eps = 1e-6f;
        std::vector<float> want(n), got(n);
        ref.rms_norm(x.data(), wp, want.data(), n, eps);
        t.rms_norm(x.data(), wp, got.data(), n, eps);
        // Sum of squares: SumSteps relative; mean, +eps, sqrt (halves it), 1/, *x, *w: 5 more
        // roundings; ref: 1.
        const double rel = (0.5 * (SumSteps(n, Lanes(isa)) + 3.0) + 6.0) * kU;
        std::vector<double> tol(n);
        for (int64_t i = 0; i < n; ++i) tol[i] = rel * std::fabs(want[i]) + kTiny;
        ExpectClose(Vars("rms_norm", isa, n, with_weight ? " w" : ""), got, want, tol);

        std::vector<float> inplace = x;  // y == x is allowed and must not change the result
        t.rms_norm(inplace.data(), wp, inplace.data(), n, eps);
        EXPECT_EQ(inplace, got) << Vars("rms_norm in place", isa, n);
      }
    }
  }
}

TEST(OpKernels, LayerNormMatchesRef) {
  const KernelTable& ref = GetKernelTable(Isa::kRef);
  for (Isa isa : AvailableIsas()) {
    const KernelTable& t = GetKernelTable(isa);
    for (int64_t n : kLengths) {
      // A large common offset makes the mean matter (the centred second pass must cope).
      const auto x = RandomNormal(n, 21 + n, 1.5f, 8.0f);
      const auto w = RandomNormal(n, 22 + n, 0.5f, 1.0f);
      const auto b = RandomNormal(n, 23 + n, 0.5f);
      const float eps = 1e-5f;
      std::vector<float> want(n), got(n);
      ref.layer_norm(x.data(), w.data(), b.data(), want.data(), n, eps);
      t.layer_norm(x.data(), w.data(), b.data(), got.data(), n, eps);

      // Error model: the mean errs by k u sum|x| / n; the variance and rstd by (k + 3) u and
      // half of that + 2u; y = (x - mean) rstd w + b adds 4 roundings (and ref 1).
      const double k = SumSteps(n, Lanes(isa));
      double sum = 0, sum_abs = 0;
      for (float v : x) sum += v, sum_abs += std::fabs(v);
      const double mean = sum / n;
      double var = 0;
      for (float v : x) var += (v - mean) * (v - mean);
      var /= n;
      const double rstd = 1.0 / std::sqrt(var + eps);
      const double mean_err = (k + 1) * kU * sum_abs / n;
      const double rstd_rel = (0.5 * (k + 3) + 2) * kU;
      std::vector<double> tol(n);
      for (int64_t i = 0; i < n; ++i) {
        const double centred = std::fabs(x[i] - mean);
        tol[i] = std::fabs(w[i]) * rstd * (mean_err + kU * centred) +
                 std::fabs(w[i]) * rstd * centred * (rstd_rel + 4 * kU) +
                 2 * kU * std::fabs(want[i]) + 2 * kU * std::fabs(b[i]) + kTiny;
      }
      ExpectClose(Vars("layer_norm", isa, n), got, want, tol);

      std::vector<float> inplace = x;
      t.layer_norm(inplace.data(), w.data(), b.data(), inplace.data(), n, eps);
      EXPECT_EQ(inplace, got) << Vars("layer_norm in place", isa, n);

      // Null weight and bias mean 1 and 0.
      std::vector<float> ones(n, 1.0f), zeros(n, 0.0f), plain(n), explicit_wb(n);
      t.layer_norm(x.data(), nullptr, nullptr, plain.data(), n, eps);
      t.layer_norm(x.data(), ones.data(), zeros.data(), explicit_wb.data(), n, eps);
      EXPECT_EQ(plain, explicit_wb) << Vars("layer_norm null w/b", isa, n);
    }
  }
}

// Softmax error model for y_i = e_i / sum e_j, e_i = exp(x_i - max): the argument x_i - max is
// rounded (u |x_i - max|), Exp errs <= 1 ulp (2u); the sum adds SumSteps u, the final scaling 2u.
std::vector<double> SoftmaxTol(const std::vector<float>& x, const std::vector<float>& want,
                               int lanes) {
  const int64_t n = static_cast<int64_t>(x.size());
  const double m = *std::max_element(x.begin(), x.end());
  double weighted = 0;  // sum_j p_j (|x_j - m| + 2) u: relative error of the denominator
  for (int64_t j = 0; j < n; ++j) {
    if (want[j] > 0) weighted += want[j] * (std::fabs(x[j] - m) + 2) * kU;
  }
  std::vector<double> tol(n);
  for (int64_t i = 0; i < n; ++i) {
    const double rel = (std::fabs(x[i] - m) + 2) * kU + weighted + (SumSteps(n, lanes) + 3) * kU;
    tol[i] = rel * want[i] + kTiny;
  }
  return tol;
}

TEST(OpKernels, SoftmaxMatchesRef) {
  const KernelTable& ref = GetKernelTable(Isa::kRef);
  for (Isa isa : AvailableIsas()) {
    const KernelTable& t = GetKernelTable(isa);
    for (int64_t n : kLengths) {
      for (float spread : {1.0f, 30.0f}) {
        const auto x = RandomNormal(n, 31 + n, spread);
        std::vector<float> want = x, got = x;
        ref.softmax(want.data(), n);
        t.softmax(got.data(), n);
        ExpectClose(Vars("softmax", isa, n, spread > 1 ? " wide" : ""), got, want,
                    SoftmaxTol(x, want, Lanes(isa)));
      }
    }
  }
}

TEST(OpKernels, SoftmaxHugeInputsDoNotOverflow) {
  const float kMax = std::numeric_limits<float>::max();
  const float kInf = std::numeric_limits<float>::infinity();
  for (Isa isa : AvailableIsas()) {
    const KernelTable& t = GetKernelTable(isa);
    // Without max subtraction exp(1e30) = inf and every output would be NaN.
    std::vector<float> x = {1e30f, 1e30f, -1e30f, 0.0f, 88.0f, 1e30f - 1e24f, kMax, -kMax, -kInf};
    for (int pad = 0; pad < 20; ++pad) x.push_back(-1e30f);  // reach the vector and tail paths
    const int64_t n = static_cast<int64_t>(x.size());
    std::vector<float> y = x;
    t.softmax(y.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(std::isfinite(y[i])) << Vars("softmax huge", isa, n) << " i=" << i;
    }
    EXPECT_EQ(y[6], 1.0f) << Vars("softmax huge", isa, n);  // FLT_MAX dominates everything
    double sum = 0;
    for (float v : y) sum += v;
    EXPECT_NEAR(sum, 1.0, 4 * kU);

    // Two equal maxima far from everything else split the mass exactly.
    std::vector<float> two = {1e30f, -3.0f, 1e30f, 5.0f, -1e30f};
    t.softmax(two.data(), 5);
    EXPECT_EQ(two[0], 0.5f);
    EXPECT_EQ(two[2], 0.5f);
    EXPECT_EQ(two[3], 0.0f);

    // A fully masked row is defined as zeros (no 0/0).
    std::vector<float> masked(13, -kInf);
    t.softmax(masked.data(), 13);
    for (float v : masked) EXPECT_EQ(v, 0.0f) << Vars("softmax masked", isa, 13);
  }
}

// A NaN score must not vanish inside softmax (it would hide a numerical failure from the E7
// checks): the whole row becomes NaN, in every ISA, wherever the NaN sits.
TEST(OpKernels, SoftmaxPropagatesNaN) {
  for (Isa isa : AvailableIsas()) {
    const KernelTable& t = GetKernelTable(isa);
    for (int64_t n : {1, 7, 33}) {
      for (int64_t at : {int64_t{0}, n / 2, n - 1}) {
        auto x = RandomNormal(n, 35 + n);
        x[at] = std::numeric_limits<float>::quiet_NaN();
        t.softmax(x.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          EXPECT_TRUE(std::isnan(x[i])) << Vars("softmax nan", isa, n) << " at=" << at
                                        << " i=" << i << " y=" << x[i];
        }
      }
    }
  }
}

TEST(OpKernels, ExpSubSumMatchesRef) {
  const KernelTable& ref = GetKernelTable(Isa::kRef);
  const float kInf = std::numeric_limits<float>::infinity();
  for (Isa isa : AvailableIsas()) {
    const KernelTable& t = GetKernelTable(isa);
    for (int64_t n : kLengths) {
      auto x = RandomNormal(n, 41 + n, 4.0f);
      if (n > 1) x[n / 2] = -kInf;  // a masked score must contribute exactly 0
      const float m = *std::max_element(x.begin(), x.end());
      std::vector<float> want(n), got(n);
      const float want_sum = ref.exp_sub_sum(x.data(), m, want.data(), n);
      const float got_sum = t.exp_sub_sum(x.data(), m, got.data(), n);
      std::vector<double> tol(n);
      double sum_tol = (SumSteps(n, Lanes(isa)) + 2) * kU * want_sum;
      for (int64_t i = 0; i < n; ++i) {
        const double rel = (std::fabs(static_cast<double>(x[i]) - m) + 3) * kU;
        tol[i] = std::isinf(x[i]) ? 0.0 : rel * want[i] + kTiny;
        sum_tol += tol[i];
      }
      ExpectClose(Vars("exp_sub_sum", isa, n), got, want, tol);
      if (n > 1) {
        EXPECT_EQ(got[n / 2], 0.0f) << Vars("exp_sub_sum -inf", isa, n);
      }
      EXPECT_NEAR(got_sum, want_sum, sum_tol) << Vars("exp_sub_sum sum", isa, n);

      std::vector<float> inplace = x;
      t.exp_sub_sum(inplace.data(), m, inplace.data(), n);
      EXPECT_EQ(inplace, got) << Vars("exp_sub_sum in place", isa, n);
    }
  }
}

// The ref kernels against direct double-precision evaluation of the definitions: they round
// once, so they agree to 1 ulp (2u relative; the ref normalizers use a double sum).
TEST(OpKernelsRef, NormsAndSoftmaxMatchDoubleFormulas) {
  const KernelTable& ref = GetKernelTable(Isa::kRef);
  for (int64_t n : kLengths) {
    const auto x = RandomNormal(n, 51 + n, 3.0f, 1.0f);
    const auto w = RandomNormal(n, 52 + n);
    const auto b = RandomNormal(n, 53 + n);
    std::vector<float> rms(n), ln(n), sm = x;
    ref.rms_norm(x.data(), w.data(), rms.data(), n, 1e-6f);
    ref.layer_norm(x.data(), w.data(), b.data(), ln.data(), n, 1e-5f);
    ref.softmax(sm.data(), n);

    double ss = 0, s = 0, mx = -INFINITY;
    for (float v : x) ss += double(v) * v, s += v, mx = std::max<double>(mx, v);
    const double mean = s / n;
    double var = 0, z = 0;
    for (float v : x) var += (v - mean) * (v - mean), z += std::exp(v - mx);
    var /= n;
    for (int64_t i = 0; i < n; ++i) {
      const double r = x[i] / std::sqrt(ss / n + double(1e-6f)) * w[i];
      const double l = (x[i] - mean) / std::sqrt(var + double(1e-5f)) * w[i] + b[i];
      const double p = std::exp(x[i] - mx) / z;
      EXPECT_NEAR(rms[i], r, 2 * kU * std::fabs(r) + kTiny) << "rms n=" << n << " i=" << i;
      EXPECT_NEAR(ln[i], l, 2 * kU * std::fabs(l) + kU * std::fabs(b[i]) + kTiny)
          << "layer_norm n=" << n << " i=" << i;
      EXPECT_NEAR(sm[i], p, 2 * kU * p + kTiny) << "softmax n=" << n << " i=" << i;
    }
  }
}

// n floats that end where an inaccessible page begins: a kernel that loads or stores a whole
// vector over a row's tail (Highway's NEON masked load / blended store did) faults here instead
// of reading past the buffer or writing the next row back behind another thread's back.
class RowBeforeGuardPage {
 public:
  explicit RowBeforeGuardPage(const std::vector<float>& values) {
    page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    void* m = mmap(nullptr, 2 * page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(m, MAP_FAILED);
    base_ = static_cast<char*>(m);
    EXPECT_EQ(mprotect(base_ + page_, page_, PROT_NONE), 0);
    data_ = reinterpret_cast<float*>(base_ + page_) - values.size();
    std::memcpy(data_, values.data(), values.size() * sizeof(float));
  }
  ~RowBeforeGuardPage() { munmap(base_, 2 * page_); }
  RowBeforeGuardPage(const RowBeforeGuardPage&) = delete;
  RowBeforeGuardPage& operator=(const RowBeforeGuardPage&) = delete;
  float* data() { return data_; }
  std::vector<float> values(size_t n) const { return std::vector<float>(data_, data_ + n); }

 private:
  size_t page_ = 0;
  char* base_ = nullptr;
  float* data_ = nullptr;
};

TEST(OpKernels, RowTailsStayInsideTheirBuffers) {
  for (const Isa isa : AvailableIsas()) {
    const KernelTable& kt = GetKernelTable(isa);
    for (int64_t n : {1, 3, 5, 7, 13, 17, 31}) {
      const auto x = RandomNormal(n, 61 + n, 2.0f);
      const auto w = RandomNormal(n, 62 + n);
      const auto b = RandomNormal(n, 63 + n);
      const size_t un = static_cast<size_t>(n);
      RowBeforeGuardPage gx(x), gw(w), gb(b), gy(std::vector<float>(un, 0.0f));
      std::vector<float> want(un);

      kt.rms_norm(x.data(), w.data(), want.data(), n, 1e-6f);
      kt.rms_norm(gx.data(), gw.data(), gy.data(), n, 1e-6f);
      EXPECT_EQ(gy.values(un), want) << Vars("rms_norm", isa, n);
      kt.layer_norm(x.data(), w.data(), b.data(), want.data(), n, 1e-5f);
      kt.layer_norm(gx.data(), gw.data(), gb.data(), gy.data(), n, 1e-5f);
      EXPECT_EQ(gy.values(un), want) << Vars("layer_norm", isa, n);
      for (auto fn : {kt.gelu_tanh, kt.gelu_erf, kt.gelu_quick, kt.silu, kt.round_f16}) {
        fn(x.data(), want.data(), n);
        fn(gx.data(), gy.data(), n);
        EXPECT_EQ(gy.values(un), want) << Vars("unary", isa, n);
      }
      kt.swiglu(x.data(), w.data(), want.data(), n);
      kt.swiglu(gx.data(), gw.data(), gy.data(), n);
      EXPECT_EQ(gy.values(un), want) << Vars("swiglu", isa, n);
      const float sum_want = kt.exp_sub_sum(x.data(), 1.0f, want.data(), n);
      const float sum_got = kt.exp_sub_sum(gx.data(), 1.0f, gy.data(), n);
      EXPECT_EQ(sum_got, sum_want) << Vars("exp_sub_sum", isa, n);
      EXPECT_EQ(gy.values(un), want) << Vars("exp_sub_sum", isa, n);
      want = x;
      kt.softmax(want.data(), n);
      kt.softmax(gx.data(), n);
      EXPECT_EQ(gx.values(un), want) << Vars("softmax", isa, n);
      // One query against one cache row, both of n floats ending at a guard page.
      float dot_want = 0, dot_got = 0;
      kt.dot_rows_f32(w.data(), 1, b.data(), un * sizeof(float), 1, n, &dot_want, 1);
      kt.dot_rows_f32(gw.data(), 1, gb.data(), un * sizeof(float), 1, n, &dot_got, 1);
      EXPECT_EQ(dot_got, dot_want) << Vars("dot_rows_f32", isa, n);
      const float p = 0.5f;
      want = w;
      kt.axpy_rows_f32(&p, 1, 1, b.data(), un * sizeof(float), 1, n, want.data());
      kt.axpy_rows_f32(&p, 1, 1, gb.data(), un * sizeof(float), 1, n, gw.data());
      EXPECT_EQ(gw.values(un), want) << Vars("axpy_rows_f32", isa, n);
    }
  }
}

}  // namespace
}  // namespace vlmd::testing
