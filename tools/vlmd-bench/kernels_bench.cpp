// `vlmd-bench kernels`: GEMV (decode) and GEMM (prefill / encoding) of every benchmarked weight
// type, reported as ratios to the read bandwidth of a same-sized working set (GEMV) and to the
// FMA peak (GEMM), both measured in this run on this machine.
#include "kernels_bench.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "core/cpu_features.h"
#include "core/temp_file.h"
#include "engine/kernels/kernel_table.h"
#include "engine/kernels/packed_int8.h"
#include "engine/kernels/tile_bf16.h"
#include "engine/ops/matmul.h"
#include "engine/tensor/quantize.h"
#include "machine_limits.h"

#if defined(__x86_64__)
constexpr bool kX86 = true;
#else
constexpr bool kX86 = false;
#endif

namespace vlmd::bench {
namespace {

using engine::DType;
using engine::DTypeName;

struct Weights {
  std::vector<uint8_t> bytes;
  engine::ops::WeightView view;
  engine::ops::PackedStore packed;  // the packed layout, when the variant asks for it
  uint64_t bytes_read() const {
    if (view.tiles) return view.tiles->bytes();
    return view.packed ? view.packed->bytes() : bytes.size();
  }
};

// A benchmarked weight variant: a GGUF type in its row layout, or repacked for the packed int8
// matmul (Q8_0 / Q4_0 exactly; F16 quantized to int8 blocks = fast precision), or (tiles) F16
// rounded to bf16 tiles for the AMX matmul (fast precision, the vision encoder's path).
struct Variant {
  DType type;
  bool packed;
  bool tiles = false;
  std::string name() const {
    if (tiles) return std::string(DTypeName(type)) + "->bf";
    return std::string(DTypeName(type)) + (packed ? (type == DType::kF16 ? "->i8" : "/pk") : "");
  }
};

Weights MakeWeights(DType type, int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f / std::sqrt(static_cast<float>(k)));
  std::vector<float> f(static_cast<size_t>(n * k));
  for (auto& v : f) v = dist(rng);
  Weights w;
  const uint64_t row = *engine::RowBytes(type, k);
  w.bytes.resize(row * n);
  auto r = engine::QuantizeTensor(type, f.data(), n, k, w.bytes.data());
  (void)r;
  w.view = {type, n, k, w.bytes.data(), row};
  return w;
}

Status MakeVariant(const engine::kernels::KernelTable& kt, Variant v, int64_t n, int64_t k,
                   uint32_t seed, Weights* w) {
  *w = MakeWeights(v.type, n, k, seed);
  if (!v.packed) return Status::Ok();
  VLMD_RETURN_IF_ERROR(engine::ops::PackWeight({&kt, engine::ops::Precision::kFast, v.tiles},
                                                &w->view, &w->packed));
  if (w->view.packed == nullptr && w->view.tiles == nullptr) {
    return InternalError("packing was refused");
  }
  return Status::Ok();
}

std::vector<float> RandomActivations(int64_t m, int64_t k) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> a(static_cast<size_t>(m * k));
  for (auto& v : a) v = dist(rng);
  return a;
}

struct Row {
  std::string kind;  // gemv | gemm
  std::string type;  // Variant::name()
  int64_t m, n, k;
  int threads;
  double ms;
  double value;      // GB/s (gemv) or GFLOP/s (gemm)
  double bound;      // bandwidth (GB/s) or peak (GFLOP/s) measured in this run
  // GEMV on int8 dot products: the GB/s at which the measured MAC peak would read these
  // weights (peak x bytes per weight; the int4 unpack+dot peak for 4-bit types, the int8 one
  // otherwise), 0 otherwise. Below `bound` the GEMV cannot reach the bandwidth even if it did
  // nothing but multiply.
  double mac_bound = 0;
  // Rows on int8 dot products: the measured MAC peak of their instructions (G MAC/s; the int4
  // unpack+dot peak for 4-bit types), 0 otherwise. The row's MACs per second over it is how
  // much of what the instruction set can multiply the kernel uses.
  double mac_peak = 0;
  double MacPeakRatio() const {
    return mac_peak > 0 ? static_cast<double>(m) * n * k / (ms * 1e-3) / 1e9 / mac_peak : 0.0;
  }
};

// The GEMV kernels of these variants multiply int8 activations by int8/int4 weights.
bool UsesInt8Dots(const Variant& v) {
  return !v.tiles && (v.packed || v.type == DType::kQ4_0 || v.type == DType::kQ8_0 ||
                      v.type == DType::kQ4_K);
}

bool HasFourBitWeights(const Variant& v) {
  return v.type == DType::kQ4_0 || v.type == DType::kQ4_K;
}

}  // namespace

int RunKernelsBench(const KernelsBenchOptions& opts) {
  auto isa = engine::kernels::SelectIsa();
  if (!isa.ok()) {
    std::fprintf(stderr, "vlmd-bench: error: %s\n", isa.status().ToString().c_str());
    return 2;
  }
  const auto& kt = engine::kernels::GetKernelTable(*isa);
  const ProbeUnit unit = ProbeUnitFor(*isa);
  // (k, n). The last full-run shape is DRAM-sized: 134 M weights (Q4_0 75 MB, the size of a
  // SmolVLM-256M decode step's reads; f16 268 MB), beyond the last-level caches of the machines
  // we measure on, where the others fit in L2/L3.
  const std::vector<std::pair<int64_t, int64_t>> gemv_shapes =
      opts.quick ? std::vector<std::pair<int64_t, int64_t>>{{2048, 2048}}
                 : std::vector<std::pair<int64_t, int64_t>>{
                       {2048, 2048}, {2048, 5632}, {5632, 2048}, {8192, 16384}};
  std::vector<Variant> gemv_types = {{DType::kQ4_0, false}, {DType::kQ8_0, false},
                                     {DType::kQ4_K, false}, {DType::kF16, false}};
  std::vector<Variant> gemm_types = {{DType::kF32, false},  {DType::kF16, false},
                                     {DType::kBF16, false}, {DType::kQ8_0, false},
                                     {DType::kQ4_0, false}};
  if (kt.packed_matmul != nullptr) {
    for (DType t : {DType::kQ4_0, DType::kQ8_0, DType::kQ4_K, DType::kF16}) {
      gemv_types.push_back({t, true});
      gemm_types.push_back({t, true});
    }
  }
  if (kt.tile_bf16_matmul != nullptr) gemm_types.push_back({DType::kF16, true, true});
  const std::vector<int64_t> gemm_m = opts.quick ? std::vector<int64_t>{512}
                                                 : std::vector<int64_t>{512, 1024};
  const int reps = opts.quick ? 5 : 15;

  std::vector<Row> rows;
  std::map<int, double> peaks, int8_peaks, int4_peaks;
  std::map<std::pair<int, uint64_t>, double> bandwidth;  // (threads, bytes) -> GB/s
  engine::ops::MatmulScratch scratch;
  for (int threads : opts.threads) {
    ThreadPool pool(threads);
    peaks[threads] = MeasureFmaPeak(pool, unit);
    int8_peaks[threads] = MeasureInt8DotPeak(pool, unit);
    int4_peaks[threads] = MeasureInt4DotPeak(pool, unit);
    for (auto [k, n] : gemv_shapes) {
      const std::vector<float> a = RandomActivations(1, k);
      std::vector<float> out(static_cast<size_t>(n));
      for (Variant type : gemv_types) {
        Weights w;
        if (Status made = MakeVariant(kt, type, n, k, 1, &w); !made.ok()) {
          std::fprintf(stderr, "vlmd-bench: %s\n", made.ToString().c_str());
          return 1;
        }
        const uint64_t bytes = w.bytes_read();
        auto& bw = bandwidth[{threads, bytes}];
        if (bw == 0) bw = MeasureReadBandwidth(pool, bytes);
        if (bw <= 0) {
          std::fprintf(stderr, "vlmd-bench: cannot allocate the bandwidth probe's buffer\n");
          return 1;
        }
        // Several calls per timing so that one sample is >= ~1 ms.
        const int calls = std::max<int>(1, static_cast<int>((8u << 20) / bytes));
        Status st;
        const double sec = MedianSeconds(reps, [&] {
          for (int c = 0; c < calls; ++c) {
            st = engine::ops::MatMul(kt, &pool, w.view, a.data(), 1, k, out.data(), n, &scratch);
          }
        }) / calls;
        if (!st.ok()) {
          std::fprintf(stderr, "vlmd-bench: %s\n", st.ToString().c_str());
          return 1;
        }
        const double bytes_per_weight = static_cast<double>(bytes) / static_cast<double>(n * k);
        const double mac_peak =
            HasFourBitWeights(type) ? int4_peaks[threads] : int8_peaks[threads];
        const bool int8_dots = UsesInt8Dots(type);
        const double mac_bound = int8_dots ? mac_peak * bytes_per_weight : 0.0;
        rows.push_back({"gemv", type.name(), 1, n, k, threads, sec * 1e3, bytes / sec / 1e9, bw,
                        mac_bound, int8_dots ? mac_peak : 0.0});
      }
    }
    for (int64_t m : gemm_m) {
      const int64_t k = 2048, n = 2048;
      const std::vector<float> a = RandomActivations(m, k);
      std::vector<float> out(static_cast<size_t>(m * n));
      for (Variant type : gemm_types) {
        Weights w;
        if (Status made = MakeVariant(kt, type, n, k, 2, &w); !made.ok()) {
          std::fprintf(stderr, "vlmd-bench: %s\n", made.ToString().c_str());
          return 1;
        }
        Status st;
        const double sec = MedianSeconds(opts.quick ? 3 : 5, [&] {
          st = engine::ops::MatMul(kt, &pool, w.view, a.data(), m, k, out.data(), n, &scratch);
        });
        if (!st.ok()) {
          std::fprintf(stderr, "vlmd-bench: %s\n", st.ToString().c_str());
          return 1;
        }
        // The x86 GEMMs read 4-bit quants unpacked to bytes once per block of panels
        // (kernels/x86/packed_matmul_inl.h): their reference is the int8 peak there.
        const bool unpacked_gemm = kX86 && m >= engine::kernels::kGemmPrepMinRows;
        const double mac_peak = HasFourBitWeights(type) && !unpacked_gemm ? int4_peaks[threads]
                                                                           : int8_peaks[threads];
        rows.push_back({"gemm", type.name(), m, n, k, threads, sec * 1e3, 2.0 * m * n * k / sec / 1e9,
                        peaks[threads], 0.0, UsesInt8Dots(type) ? mac_peak : 0.0});
      }
    }
  }

  const CpuFeatures& cpu = GetCpuFeatures();
  std::printf("vlmd-bench kernels | cpu: %s | kernels: %s | probes: %s\n", cpu.brand.c_str(),
              std::string(engine::kernels::IsaName(*isa)).c_str(), ProbeUnitName(unit));
  for (auto [t, p] : peaks) std::printf("measured f32 FMA peak, %d thread(s): %.1f GFLOP/s\n", t, p);
  for (auto [t, p] : int8_peaks) {
    if (p > 0) {
      std::printf("measured int8 MAC peak (%s), %d thread(s): %.1f G/s\n",
                  Int8DotPeakInstructions(unit), t, p);
    }
  }
  for (auto [t, p] : int4_peaks) {
    if (p > 0) {
      std::printf("measured int4 unpack+dot peak (%s), %d thread(s): %.1f G weights/s\n",
                  Int4DotPeakInstructions(unit), t, p);
    }
  }
  std::printf("(type/pk: the packed int8 layout of that type; f16->i8: F16 weights quantized to\n"
              " int8 blocks at load, the fast precision; f16->bf: F16 weights as bf16 tiles on AMX, the fast\n"
              " precision of the vision encoder. GEMV bytes are those of the layout read. mac-bound:\n"
              " the GB/s at which the int8 MAC peak (4-bit types: the int4 unpack+dot peak) reads\n"
              " the weights; where it is below the bandwidth, a GEMV that only multiplied could not\n"
              " reach the bandwidth either. of-mac: the row's multiply-adds per second over that\n"
              " peak, for the kernels on int8 dot products; x86 GEMM rows of 4-bit types over the\n"
              " int8 peak, as they unpack their quants once per block of panels.)\n");
  std::printf("\n%-5s %-7s %5s %5s %5s %3s %9s %12s %12s %6s %10s %6s\n", "path", "type", "M", "N",
              "K", "thr", "ms", "achieved", "bound", "ratio", "mac-bound", "of-mac");
  nlohmann::json j;
  j["cpu"] = cpu.brand;
  j["cpu_features"] = cpu.ToString();
  j["kernel_isa"] = std::string(engine::kernels::IsaName(*isa));
  j["probe_unit"] = ProbeUnitName(unit);
  for (auto [t, p] : peaks) j["fma_peak_gflops"][std::to_string(t)] = p;
  for (auto [t, p] : int8_peaks) j["int8_mac_peak_g_s"][std::to_string(t)] = p;
  for (auto [t, p] : int4_peaks) j["int4_dot_peak_g_weights_s"][std::to_string(t)] = p;
  for (const Row& r : rows) {
    const bool gemv = r.kind == "gemv";
    char mac[32] = "";
    if (r.mac_bound > 0) std::snprintf(mac, sizeof(mac), "%5.1f GB/s", r.mac_bound);
    char of_mac[16] = "";
    if (r.mac_peak > 0) std::snprintf(of_mac, sizeof(of_mac), "%6.2f", r.MacPeakRatio());
    std::printf("%-5s %-7s %5lld %5lld %5lld %3d %9.3f %7.1f %-4s %7.1f %-4s %6.2f %10s %6s\n",
                r.kind.c_str(), r.type.c_str(),
                static_cast<long long>(r.m), static_cast<long long>(r.n),
                static_cast<long long>(r.k), r.threads, r.ms, r.value, gemv ? "GB/s" : "GF/s",
                r.bound, gemv ? "GB/s" : "GF/s", r.value / r.bound, mac, of_mac);
    j["results"].push_back({{"path", r.kind}, {"type", r.type},
                            {"m", r.m}, {"n", r.n}, {"k", r.k}, {"threads", r.threads},
                            {"ms", r.ms}, {gemv ? "gb_s" : "gflop_s", r.value},
                            {gemv ? "bandwidth_gb_s" : "peak_gflop_s", r.bound},
                            {"ratio", r.value / r.bound}});
    if (r.mac_bound > 0) j["results"].back()["int8_mac_bound_gb_s"] = r.mac_bound;
    if (r.mac_peak > 0) j["results"].back()["of_int8_mac_peak"] = r.MacPeakRatio();
  }
  if (opts.json_path == "-") {
    std::cout << j.dump(2) << "\n";
  } else if (!opts.json_path.empty()) {
    const std::string text = j.dump(2) + "\n";
    const Status written = WriteFileAtomically(
        opts.json_path, std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
    if (!written.ok()) {
      std::cerr << "vlmd-bench: error: " << written.ToString() << "\n";
      return 2;
    }
  }
  return 0;
}

}  // namespace vlmd::bench
