// Matmul micro benchmark: ops::MatMul per weight type x ISA x shape x threads, reporting weight
// bytes/s (decode is bandwidth bound) and GFLOP/s (prefill is compute bound), next to a plain
// read-bandwidth loop over a buffer of the same size, so ratios come from the same run. Also the
// bf16 flash attention kernel of each table that has one, and its int8-score variant (one head,
// one thread).
//   vlmd_bench_matmul --benchmark_filter='gemv/q4_0' --benchmark_repetitions=5
//   vlmd_bench_matmul --benchmark_filter='tile_attention/'
//   vlmd_bench_matmul --benchmark_filter='gemm_tiles/amx/.*/t2'
#include <benchmark/benchmark.h>

#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/thread_pool.h"
#include "engine/kernels/kernel_table.h"
#include "engine/kernels/packed_int8.h"
#include "engine/kernels/tile_bf16.h"
#include "engine/ops/matmul.h"
#include "engine/tensor/dtype.h"
#include "engine/tensor/quantize.h"

namespace vlmd::engine {
namespace {

using kernels::Isa;

std::vector<float> RandomFloats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Quantized weights, built once per (type, n, k) and shared by all benchmarks of that shape.
const std::vector<uint8_t>& Weights(DType type, int64_t n, int64_t k) {
  static std::map<std::tuple<int, int64_t, int64_t>, std::vector<uint8_t>> cache;
  auto key = std::make_tuple(static_cast<int>(type), n, k);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  const size_t rb = *RowBytes(type, k);
  std::vector<uint8_t> w(rb * n);
  const QuantizeRowFn q = FindQuantizeRowFn(type);
  std::vector<float> row;
  for (int64_t r = 0; r < n; ++r) {
    row = RandomFloats(k, static_cast<uint32_t>(r));
    q(row.data(), w.data() + r * rb, k);
  }
  return cache.emplace(key, std::move(w)).first->second;
}

ThreadPool* Pool(int threads) {
  static std::map<int, std::unique_ptr<ThreadPool>> pools;
  auto& p = pools[threads];
  if (!p) p = std::make_unique<ThreadPool>(threads);
  return p.get();
}

// ops::MatMul of m rows over an n x k weight of `type`: as the GGUF rows (packed = false), or
// packed as the engine packs it for the fast precision (ops::PackWeight: packed int8, on the
// tile unit from 32 rows where the CPU has AMX; the decoder's prompt products).
void BM_Matmul(benchmark::State& state, DType type, Isa isa, int64_t m, int64_t n, int64_t k,
               int threads, bool packed) {
  const kernels::KernelTable& kt = kernels::GetKernelTable(isa);
  const std::vector<uint8_t>& w = Weights(type, n, k);
  const std::vector<float> a = RandomFloats(m * k, 7);
  std::vector<float> out(m * n);
  ops::MatmulScratch scratch;
  ops::WeightView wv{type, n, k, w.data(), 0};
  ops::PackedStore store;
  if (packed) {
    const Status s = ops::PackWeight({&kt, ops::Precision::kFast}, &wv, &store);
    if (!s.ok() || wv.packed == nullptr) {
      state.SkipWithError(s.ok() ? "not packed on this ISA" : s.ToString().c_str());
      return;
    }
  }
  ThreadPool* pool = Pool(threads);
  for (auto _ : state) {
    const Status s = ops::MatMul(kt, pool, wv, a.data(), m, k, out.data(), n, &scratch);
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize(out.data());
  }
  const double iters = static_cast<double>(state.iterations());
  // The bytes a product reads: the packed matrix where there is one.
  const double bytes =
      wv.packed != nullptr ? static_cast<double>(wv.packed->bytes()) : static_cast<double>(w.size());
  state.counters["GB/s"] = benchmark::Counter(bytes * iters / 1e9, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * m * n * k * iters / 1e9,
                                                 benchmark::Counter::kIsRate);
}

// ops::TileMatMul as the vision encoders call it (fast precision on AMX): m bf16 activation
// rows times an n x k F16 weight packed as bf16 tiles, with a bias; `out` says what the block
// does with the product: bf16 rows (q/k/v, the FFN's up projection with GELU) or added into the
// f32 residual stream (the output and down projections).
enum class TileOut { kBf16, kBf16Gelu, kAddF32 };
// `cold`: the product rotates over copies of the weight that together exceed the caches (as an
// encoder's layers do: Qwen3-VL-2B's ViT holds 576 MB of bf16 tiles), so the weights come from
// DRAM; otherwise one copy stays in the caches.
void BM_TileGemm(benchmark::State& state, Isa isa, int64_t m, int64_t n, int64_t k, TileOut out,
                 int threads, bool cold) {
  const kernels::KernelTable& kt = kernels::GetKernelTable(isa);
  const std::vector<uint8_t>& w = Weights(DType::kF16, n, k);
  ops::PackedStore store;
  ops::WeightPacking packing{&kt, ops::Precision::kFast};
  packing.bf16_tiles = true;
  const int64_t copies = cold ? std::max<int64_t>(1, (int64_t{320} << 20) / (2 * n * k)) : 1;
  std::vector<ops::WeightView> views;
  for (int64_t c = 0; c < copies; ++c) {
    ops::WeightView wv{DType::kF16, n, k, w.data(), 0};
    const Status packed = ops::PackWeight(packing, &wv, &store);
    if (!packed.ok() || wv.tiles == nullptr) {
      state.SkipWithError(packed.ok() ? "no tile unit on this ISA" : packed.ToString().c_str());
      return;
    }
    views.push_back(wv);
  }
  const int64_t lda = kernels::TileRowStride(kernels::TileBf16Matrix::PaddedK(k));
  const int64_t ldo16 = kernels::TileRowStride(n);
  const int64_t rows = (m + 15) / 16 * 16;
  std::vector<uint16_t> a(static_cast<size_t>(rows * lda), 0);
  const std::vector<float> af = RandomFloats(m * k, 7);
  for (int64_t r = 0; r < m; ++r) kt.to_bf16(af.data() + r * k, a.data() + r * lda, k);
  const std::vector<float> bias = RandomFloats(n, 8);
  std::vector<float> out32(static_cast<size_t>(m * n));
  std::vector<uint16_t> out16(static_cast<size_t>(rows * ldo16));
  kernels::TileBf16Args args{.a = a.data(), .lda = lda, .bias = bias.data()};
  if (out == TileOut::kAddF32) {
    args.out = out32.data();
    args.ldo = n;
    args.accumulate = true;
  } else {
    args.out_bf16 = out16.data();
    args.ldo_bf16 = ldo16;
    if (out == TileOut::kBf16Gelu) args.act = kt.gelu_tanh_fast;
  }
  ThreadPool* pool = Pool(threads);
  size_t next = 0;
  for (auto _ : state) {
    const Status s = ops::TileMatMul(kt, pool, *views[next].tiles, args, m);
    next = (next + 1) % views.size();
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize(out32.data());
    benchmark::DoNotOptimize(out16.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * m * n * k * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

// Reads `bytes` with `threads` threads (each a disjoint slice), summing 64-bit words: the
// bandwidth a GEMV over weights of that size could reach at best.
void BM_ReadBandwidth(benchmark::State& state, size_t bytes, int threads) {
  std::vector<uint64_t> buf(bytes / 8, 1);
  ThreadPool* pool = Pool(threads);
  std::vector<uint64_t> sums(threads * 8);
  for (auto _ : state) {
    pool->ParallelFor(threads, [&](int64_t t, int) {
      int64_t b, e;
      SplitRange(static_cast<int64_t>(buf.size()), threads, t, 8, &b, &e);
      uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      for (int64_t i = b; i + 4 <= e; i += 4) {
        s0 += buf[i], s1 += buf[i + 1], s2 += buf[i + 2], s3 += buf[i + 3];
      }
      sums[t * 8] = s0 + s1 + s2 + s3;
    });
    benchmark::DoNotOptimize(sums.data());
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(bytes) * state.iterations() / 1e9,
                                              benchmark::Counter::kIsRate);
}

// One head of attention on the table's bf16 flash kernel: n queries over n keys of hd dims. No
// mask: the vision encoder's (SigLIP-B: n 1024, hd 64), 2 n^2 hd multiply-adds (scores and P V).
// Causal: a prompt's prefill (SmolLM2: pp512, hd 64), query r seeing keys [0, r], n (n + 1) hd
// multiply-adds that count.
// int8: the scores on int8 (tile_attention_i8, attention_i8.h), unmasked; the operands'
// quantization is outside the timed loop, as the bf16 packing is.
void BM_TileAttention(benchmark::State& state, Isa isa, int64_t n, int64_t hd, bool causal,
                      bool int8) {
  const kernels::KernelTable& kt = kernels::GetKernelTable(isa);
  const int64_t hd_pad = kernels::TileBf16Matrix::PaddedK(hd);
  const int64_t n_pad = (n + 31) / 32 * 32;  // V^T's keys, Q's readable rows
  auto bf16 = [](int64_t count, uint32_t seed) {
    const std::vector<float> f = RandomFloats(count, seed);
    std::vector<uint16_t> b(f.size());
    kernels::ToBf16Ref(f.data(), b.data(), count);
    return b;
  };
  std::vector<uint16_t> q = bf16(n_pad * hd_pad, 1), k = bf16(n * hd, 2), v = bf16(n * hd, 3);
  std::vector<uint16_t> k_tiles(kernels::TileBf16Matrix::PanelElements(n, hd_pad));
  std::vector<uint16_t> v_tiles(kernels::TileBf16Matrix::PanelElements(hd, n_pad));
  kernels::TileBf16Matrix::PackRows(k.data(), hd, n, hd, hd_pad, k_tiles.data());
  kernels::TileBf16Matrix::PackColumns(v.data(), hd, hd, n, n_pad, v_tiles.data());
  std::vector<uint16_t> out(n * hd);
  std::vector<float> scratch_buf(32 * (hd_pad + 16) + 16);  // o_scratch must be 64-byte aligned
  void* scratch = scratch_buf.data();
  size_t space = scratch_buf.size() * sizeof(float);
  std::align(64, 32 * (hd_pad + 16) * sizeof(float), scratch, space);
  kernels::TileAttentionArgs a;
  a.q = q.data();
  a.ldq = hd_pad;
  a.k_tiles = k_tiles.data();
  a.v_tiles = v_tiles.data();
  a.v_k = n_pad;
  a.n_q = n;
  a.n_kv = n;
  a.hd = hd;
  a.hd_pad = hd_pad;
  a.out = out.data();
  a.ldo = hd;
  a.o_scratch = static_cast<float*>(scratch);
  std::vector<int32_t> first(n, 0), end(n);
  for (int64_t r = 0; r < n; ++r) end[r] = static_cast<int32_t>(r + 1);
  if (causal) {
    a.kv_first = first.data();
    a.kv_end = end.data();
  }
  std::vector<uint8_t> q_u8(static_cast<size_t>(n_pad * hd_pad), 128);
  std::vector<float> q_scale(static_cast<size_t>(n_pad), 0.0f), mean(static_cast<size_t>(hd_pad));
  std::vector<int8_t> k_i8(kernels::KeyPanelsI8Bytes(n, hd_pad));
  std::vector<float> k_scale(static_cast<size_t>(kernels::KeyPanelsI8Keys(n)));
  std::vector<int32_t> k_bias(k_scale.size());
  if (int8) {
    const std::vector<float> qf = RandomFloats(n * hd, 1), kf = RandomFloats(n * hd, 2);
    kt.quantize_queries_i8(qf.data(), hd, n, hd, hd_pad, 0.18f, q_u8.data(), q_scale.data());
    kt.pack_keys_i8(kf.data(), hd, n, hd, hd_pad, k_i8.data(), k_scale.data(), k_bias.data(),
                    mean.data());
    a.q_u8 = q_u8.data();
    a.q_scale = q_scale.data();
    a.k_i8 = k_i8.data();
    a.k_scale = k_scale.data();
    a.k_bias = k_bias.data();
  }
  const kernels::TileAttentionFn attend = int8 ? kt.tile_attention_i8 : kt.tile_attention;
  for (auto _ : state) {
    attend(a);
    benchmark::DoNotOptimize(out.data());
  }
  const double macs = causal ? double(n) * (n + 1) * hd : 2.0 * n * n * hd;
  state.counters["GMAC/s"] = benchmark::Counter(
      macs * static_cast<double>(state.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
}

void RegisterAll() {
  for (int i = kernels::kNumIsas - 1; i >= 0; --i) {
    const Isa isa = static_cast<Isa>(i);
    if (!kernels::IsaAvailable(isa) || kernels::GetKernelTable(isa).tile_attention == nullptr) {
      continue;
    }
    for (int64_t hd : {64, 128}) {
      const std::string name = "tile_attention/" + std::string(kernels::IsaName(isa)) +
                               "/n1024_hd" + std::to_string(hd) + "/t1";
      benchmark::RegisterBenchmark(name.c_str(), BM_TileAttention, isa, 1024, hd, false, false)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
      if (kernels::GetKernelTable(isa).tile_attention_i8 == nullptr) continue;
      const std::string i8 = "tile_attention_i8/" + std::string(kernels::IsaName(isa)) +
                             "/n1024_hd" + std::to_string(hd) + "/t1";
      benchmark::RegisterBenchmark(i8.c_str(), BM_TileAttention, isa, 1024, hd, false, true)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
    const std::string causal =
        "tile_attention/" + std::string(kernels::IsaName(isa)) + "/causal_n512_hd64/t1";
    benchmark::RegisterBenchmark(causal.c_str(), BM_TileAttention, isa, 512, 64, true, false)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
  const DType gemv_types[] = {DType::kQ4_0, DType::kQ8_0, DType::kQ4_K, DType::kF16,
                              DType::kQ4_1, DType::kQ5_0, DType::kQ5_K, DType::kQ6_K,
                              DType::kBF16, DType::kF32};
  const DType gemm_types[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0,
                              DType::kQ4_0, DType::kQ4_K, DType::kQ6_K};
  struct Shape {
    int64_t n, k;
  };
  const Shape gemv_shapes[] = {{2048, 2048}, {5632, 2048}, {2048, 5632}, {5632, 5632}};
  const Shape gemm_shapes[] = {{2048, 2048}, {768, 768}};
  const int64_t gemm_rows[] = {512, 1024};
  for (int threads : {1, 2}) {
    for (const Shape& s : gemv_shapes) {
      for (size_t bytes : {s.n * s.k / 2, s.n * s.k * 2}) {  // ~Q4 and ~F16 sized
        benchmark::RegisterBenchmark(("read/" + std::to_string(bytes >> 20) + "MiB/t" +
                                      std::to_string(threads)).c_str(),
                                     BM_ReadBandwidth, bytes, threads)
            ->UseRealTime();
      }
    }
    for (int i = kernels::kNumIsas - 1; i >= 0; --i) {
      const Isa isa = static_cast<Isa>(i);
      if (!kernels::IsaAvailable(isa) || isa == Isa::kRef) continue;
      const std::string isa_name(kernels::IsaName(isa));
      for (DType t : gemv_types) {
        for (const Shape& s : gemv_shapes) {
          const std::string name = "gemv/" + std::string(DTypeName(t)) + "/" + isa_name + "/n" +
                                   std::to_string(s.n) + "_k" + std::to_string(s.k) + "/t" +
                                   std::to_string(threads);
          benchmark::RegisterBenchmark(name.c_str(), BM_Matmul, t, isa, 1, s.n, s.k, threads, false)
              ->UseRealTime();
        }
      }
      // The decode GEMV on packed int8 weights (what a decode step runs): from the caches
      // (2048 x 2048, ~2.3 MB) and from DRAM (a 151936 x 2048 output head, ~175 MB).
      const Shape gemv_packed_shapes[] = {{2048, 2048}, {151936, 2048}};
      for (DType t : {DType::kQ4_0, DType::kQ4_K, DType::kQ8_0}) {
        for (const Shape& s : gemv_packed_shapes) {
          const std::string name = "gemv_packed/" + std::string(DTypeName(t)) + "/" + isa_name +
                                   "/n" + std::to_string(s.n) + "_k" + std::to_string(s.k) +
                                   "/t" + std::to_string(threads);
          benchmark::RegisterBenchmark(name.c_str(), BM_Matmul, t, isa, 1, s.n, s.k, threads, true)
              ->UseRealTime();
        }
      }
      // Prompt products of the benchmark models' shapes: the FFN down projections of
      // InternVL3-2B's text (k 8960) and Qwen2.5-3B (k 11008), and a 2048-wide square one;
      // q4_K for the Q4_K_M files users download (its tiles also subtract a min term).
      const Shape packed_shapes[] = {{1536, 8960}, {2048, 11008}, {2048, 2048}};
      for (DType t : {DType::kQ4_0, DType::kQ4_K, DType::kQ8_0}) {
        for (const Shape& s : packed_shapes) {
          const std::string name = "gemm_packed/" + std::string(DTypeName(t)) + "/" + isa_name +
                                   "/m512_n" + std::to_string(s.n) + "_k" + std::to_string(s.k) +
                                   "/t" + std::to_string(threads);
          benchmark::RegisterBenchmark(name.c_str(), BM_Matmul, t, isa, 512, s.n, s.k, threads, true)
              ->UseRealTime()
              ->Unit(benchmark::kMillisecond);
        }
      }
      // A step of batched decode (8 sequences, continuous batching): too few rows for the
      // prepared operands of the prompt products, so the tiles convert per tile.
      for (DType t : {DType::kQ4_0, DType::kQ4_K, DType::kQ8_0}) {
        const std::string name = "gemm_packed/" + std::string(DTypeName(t)) + "/" + isa_name +
                                 "/m8_n2048_k2048/t" + std::to_string(threads);
        benchmark::RegisterBenchmark(name.c_str(), BM_Matmul, t, isa, 8, 2048, 2048, threads, true)
            ->UseRealTime();
      }
      // The encoders' products without a tile unit (F16 weights packed as int8 by the fast
      // precision): InternViT-300M's at 448x448 (1025 patches, d 1024, ffn 4096).
      const Shape encoder_shapes[] = {{1024, 1024}, {4096, 1024}, {1024, 4096}};
      for (const Shape& s : encoder_shapes) {
        const std::string name = "gemm_packed/f16/" + isa_name + "/m1025_n" + std::to_string(s.n) +
                                 "_k" + std::to_string(s.k) + "/t" + std::to_string(threads);
        benchmark::RegisterBenchmark(name.c_str(), BM_Matmul, DType::kF16, isa, 1025, s.n, s.k,
                                     threads, true)
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
      }
      // The encoders' products on the tile unit: Qwen3-VL-2B's ViT at 448x448 (784 patches,
      // d 1024, ffn 4096) and SigLIP-B at 512 (1024 patches, d 768, ffn 3072).
      struct TileShape {
        int64_t m, n, k;
        TileOut out;
        const char* what;
      };
      const TileShape tile_shapes[] = {
          {784, 1024, 1024, TileOut::kBf16, "qkv"},   {784, 1024, 1024, TileOut::kAddF32, "o"},
          {784, 4096, 1024, TileOut::kBf16Gelu, "up"}, {784, 1024, 4096, TileOut::kAddF32, "down"},
          {784, 4096, 1024, TileOut::kBf16, "upnoact"},
          {1024, 768, 768, TileOut::kBf16, "qkv"},    {1024, 3072, 768, TileOut::kBf16Gelu, "up"},
          {1024, 768, 3072, TileOut::kAddF32, "down"}};
      for (const TileShape& s : tile_shapes) {
        for (bool cold : {false, true}) {
          const std::string name = "gemm_tiles/" + isa_name + "/" + s.what + "_m" +
                                   std::to_string(s.m) + "_n" + std::to_string(s.n) + "_k" +
                                   std::to_string(s.k) + (cold ? "_cold" : "") + "/t" +
                                   std::to_string(threads);
          benchmark::RegisterBenchmark(name.c_str(), BM_TileGemm, isa, s.m, s.n, s.k, s.out,
                                       threads, cold)
              ->UseRealTime()
              ->Unit(benchmark::kMillisecond);
        }
      }
      for (DType t : gemm_types) {
        for (int64_t m : gemm_rows) {
          for (const Shape& s : gemm_shapes) {
            const std::string name = "gemm/" + std::string(DTypeName(t)) + "/" + isa_name + "/m" +
                                     std::to_string(m) + "_n" + std::to_string(s.n) + "_k" +
                                     std::to_string(s.k) + "/t" + std::to_string(threads);
            benchmark::RegisterBenchmark(name.c_str(), BM_Matmul, t, isa, m, s.n, s.k, threads, false)
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace vlmd::engine

int main(int argc, char** argv) {
  vlmd::engine::RegisterAll();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
