// KernelTable: the single dispatch mechanism of the engine. One table per instruction set, filled
// once; ops/ picks the active table (best ISA of this CPU, or VLMD_FORCE_ISA) and calls through
// it. Every slot has a scalar reference twin (the kRef table) that tests compare against.
//
// Kernels never allocate, throw, log or spawn threads: ops/ validates shapes, owns scratch
// buffers and splits work over the ThreadPool; a kernel gets pointers and a sub-range.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "core/status.h"
#include "engine/kernels/attention_i8.h"
#include "engine/tensor/dtype.h"

namespace vlmd::engine::kernels {

// kAvxVnni: AVX2 plus AVX-VNNI's 256-bit vpdpbusd (Alder Lake and later, Sierra Forest; Zen 5
// and Sapphire Rapids have it too but pick their AVX-512 tables).
// kAvx512: AVX-512 F/BW/DQ/VL (Skylake-SP and later); kAvx512Vnni: plus VNNI's vpdpbusd (Cascade
// Lake, Ice Lake); kAvx512Bf16: plus AVX512-BF16's vdpbf16ps (Zen 4/5, Cooper Lake); kAmx: plus
// the AMX tile unit (bf16 tile matmul, tile_bf16.h).
// kNeon: aarch64 Advanced SIMD (every ARMv8-A CPU); kNeonDot: plus the int8 dot product (SDOT);
// kNeonI8mm: plus the int8 matrix multiply (SMMLA).
// Each architecture's ISAs form one chain, in the order of the values (a table inherits the
// slots of the ones below it), with one side branch: kAvxVnni inherits kAvx2, but no table
// above inherits kAvxVnni (Skylake-SP has AVX-512 without AVX-VNNI, and the AVX512-VNNI tables
// have their own 512-bit products). The values are used only inside one process.
enum class Isa : uint8_t {
  kRef = 0, kAvx2 = 1, kAvxVnni = 2, kAvx512 = 3, kAvx512Vnni = 4, kAvx512Bf16 = 5, kAmx = 6,
  kNeon = 7, kNeonDot = 8, kNeonI8mm = 9
};
inline constexpr int kNumIsas = 10;

// "ref", "avx2", "avxvnni", "avx512", "avx512vnni", "avx512bf16", "amx", "neon", "neondot",
// "neoni8mm"
std::string_view IsaName(Isa isa);
std::optional<Isa> ParseIsa(std::string_view name);
bool IsaAvailable(Isa isa);                      // this CPU (and OS) can run it
Isa BestAvailableIsa();
// The ISA the engine uses: VLMD_FORCE_ISA if set (INVALID_ARGUMENT when unknown, UNIMPLEMENTED
// when this CPU lacks it), else BestAvailableIsa().
Result<Isa> SelectIsa();

// One matmul work item: out[m * out_stride + n] = sum_k W[n, k] * A[m, k]
// W: weight rows in the weight's dtype, row n at w + n * w_row_bytes.
// A: activation rows already converted to the weight type's activation format (act_type below),
//    row m at a + m * a_row_bytes.
struct MatmulArgs {
  const uint8_t* w = nullptr;
  size_t w_row_bytes = 0;
  const uint8_t* a = nullptr;
  size_t a_row_bytes = 0;
  float* out = nullptr;
  int64_t out_stride = 0;  // floats between output rows
  int64_t k = 0;           // reduction length (a multiple of the weight's block size)
};
// Computes the output block rows [m0, m1) x columns [n0, n1).
using MatmulFn = void (*)(const MatmulArgs& args, int64_t m0, int64_t m1, int64_t n0, int64_t n1);
// Packed int8 matmul (packed_int8.h): out rows [m0, m1) x the 16-column panels [p0, p1).
struct PackedMatmulArgs;
// bf16 tile matmul (tile_bf16.h): out rows [m0, m1) x the 16-column panels [p0, p1).
struct TileBf16Args;
using TileBf16MatmulFn = void (*)(const TileBf16Args& args, int64_t m0, int64_t m1, int64_t p0,
                                  int64_t p1);
// f32 -> bf16 (round to nearest even) for n values.
using ToBf16Fn = void (*)(const float* x, uint16_t* y, int64_t n);
// f16 -> bf16 for n values: the exact f32 value rounded to nearest even (as ToBf16Fn would).
using F16ToBf16Fn = void (*)(const uint16_t* x, uint16_t* y, int64_t n);
// One head's attention on the tile unit (tile_bf16.h: TileAttentionArgs).
struct TileAttentionArgs;
using TileAttentionFn = void (*)(const TileAttentionArgs& args);
// Tile operand packing of bf16 rows, TileBf16Matrix::PackRows / PackColumns (same contract).
using TilePackFn = void (*)(const uint16_t* rows, int64_t row_stride, int64_t n, int64_t k_valid,
                            int64_t k, uint16_t* dst);
using PackedMatmulFn = void (*)(const PackedMatmulArgs& args, int64_t m0, int64_t m1, int64_t p0,
                                int64_t p1);
// Panels [p0, p1) of a packed int8 matrix as bf16 tile panels (PackedToTilesRef's contract).
class PackedMatrix;
using PackedToTilesFn = void (*)(const PackedMatrix& w, int64_t p0, int64_t p1, uint16_t* dst);
// Converts k f32 activations into a row of the activation format (e.g. Q8_0 blocks).
using ConvertRowFn = void (*)(const float* x, void* y, int64_t k);
// The packed matmul's activations in one pass: k f32 values into ceil(k / 32) Q8_0 blocks (the
// bytes of convert_act[kQ8_0] on the row zero-padded to whole blocks, as a float matrix of such
// a k is packed) and sums[b], the int32 sum of block b's 32 quants (the kernels' offset
// correction).
using ConvertQ8_0SumsFn = void (*)(const float* x, void* y, int32_t* sums, int64_t k);

// Row-wise elementwise kernels (one row of n >= 1 floats; x and y may alias). Reductions
// accumulate in f32 lanes (ref: double). weight/bias may be nullptr (= 1 / = 0).
// rms_norm: y = x / sqrt(mean(x^2) + eps) * weight
using RmsNormFn = void (*)(const float* x, const float* weight, float* y, int64_t n, float eps);
// layer_norm: y = (x - mean) / sqrt(var + eps) * weight + bias (two-pass mean, then variance)
using LayerNormFn = void (*)(const float* x, const float* weight, const float* bias, float* y,
                             int64_t n, float eps);
// In place, max-subtracted (no overflow for any finite input). A row of only -inf becomes zeros;
// a row with a NaN becomes all NaN (never silently finite).
using SoftmaxFn = void (*)(float* x, int64_t n);
using UnaryFn = void (*)(const float* x, float* y, int64_t n);
using BinaryFn = void (*)(const float* a, const float* b, float* y, int64_t n);
// Rotary embedding of one token, in place: head h starts at x + h * head_stride, and its first
// n_rot values (n_rot even) are rotated in pairs; the rest of the head is untouched. Pair i
// (i < n_rot/2) turns by angle theta_i, given planar as cos_sin[i] = cos(theta_i) and
// cos_sin[n_rot/2 + i] = sin(theta_i) (ops/rope.h builds the table; a per-token table also covers
// multi-section and 2-D rope). neox: pairs (x[i], x[i + n_rot/2]); normal: pairs (x[2i], x[2i+1]).
using RopeFn = void (*)(float* x, int64_t n_heads, int64_t head_stride, const float* cos_sin,
                        int64_t n_rot, bool neox);
// y[i] = exp(x[i] - max) for i < n; returns the f32 sum of the y. x and y may alias. x[i] = -inf
// gives 0. Used by softmax and by the streaming softmax of attention.
using ExpSubSumFn = float (*)(const float* x, float max, float* y, int64_t n);
// Attention inner products of g >= 1 query vectors (the query heads of one kv head under GQA;
// q_h at q + h * n) against n_rows cache rows of n elements (F32 or F16 per the slot), row j at
// rows + j * row_stride_bytes:  out[h * out_stride + j] = dot(q_h, row_j). Each row is loaded
// (and converted) once for the whole group.
using DotRowsFn = void (*)(const float* q, int64_t g, const void* rows, size_t row_stride_bytes,
                           int64_t n_rows, int64_t n, float* out, int64_t out_stride);
// acc[h * n + i] += sum_j w[h * w_stride + j] * row_j[i] for h < g, i < n (rows laid out as for
// DotRowsFn, each loaded once for the group).
using AxpyRowsFn = void (*)(const float* w, int64_t w_stride, int64_t g, const void* rows,
                            size_t row_stride_bytes, int64_t n_rows, int64_t n, float* acc);

inline constexpr int kMaxDType = 32;

struct KernelTable {
  Isa isa = Isa::kRef;
  // Matmul, indexed by the weight DType id. nullptr: this weight type has no matmul.
  std::array<MatmulFn, kMaxDType> matmul{};
  // Activation format the matmul of each weight type expects (e.g. Q4_0 -> Q8_0, Q4_K -> Q8_K).
  std::array<DType, kMaxDType> act_type{};
  // f32 -> activation format, indexed by the activation DType id.
  std::array<ConvertRowFn, kMaxDType> convert_act{};
  ConvertQ8_0SumsFn convert_q8_0_sums = nullptr;  // every table (ref: the two passes)
  // Matmul over weights repacked at load (PackedMatrix): vpdpbusd on AVX512-VNNI and AVX-VNNI,
  // vpmaddubsw on AVX2 and plain AVX-512; on aarch64 SMMLA (i8mm), SDOT (dotprod) or widening
  // multiplies. nullptr (the scalar table only): the GGUF row layout is kept (the engine then
  // does not pack).
  PackedMatmulFn packed_matmul = nullptr;
  // How far ahead (in 32-element blocks, 1 KB each in a panel group's stream) the x86 4-bit
  // GEMV tiles prefetch their weights (PackedMatmulArgs::gemv_prefetch_blocks_q4): the machine's
  // memory latency, not the ISA, decides it. 4 measured best on an Intel Sapphire Rapids VM
  // (session 8), 6-8 on an AMD Zen 5 VM (session 24: q4_0 decode +7% on one thread, +2-3% on
  // two, against 4), so AMD CPUs (and Hygon's Zen-based ones) take 8.
  int64_t gemv_prefetch_blocks_q4 = 4;
  // Matmul over bf16 tile-packed weights (TileBf16Matrix) on the AMX unit, and the activation
  // conversion it needs (every table has one; SIMD on x86 from the avx2 table up and on arm64).
  // The tile matmul is nullptr without AMX: the engine then never packs bf16 tiles (the scalar
  // reference TileBf16MatmulRef exists for tests only, it is far too slow to be a fallback).
  TileBf16MatmulFn tile_bf16_matmul = nullptr;
  ToBf16Fn to_bf16 = nullptr;
  F16ToBf16Fn f16_to_bf16 = nullptr;  // f16 K/V cache rows for tile_attention (x86 avx2 up, arm64)
  // Packed int8 panels to bf16 tile panels, so that fast-precision GEMMs over packed weights can
  // run on the tile unit (nullptr where tile_bf16_matmul is).
  PackedToTilesFn packed_to_tiles = nullptr;
  // GELU (tanh form) to 1e-4 relative, for the fast precision's encoder, whose values are rounded
  // to bf16 (the tile epilogue) or quantized to int8 (the next packed product) right after.
  UnaryFn gelu_tanh_fast = nullptr;
  // The fast precision's attention (encoder, prompts) on bf16 operands: AMX tiles, vdpbf16ps
  // (avx512bf16) or FMAs (avx512, avx512vnni, avx2, avxvnni; NEON on every arm64 table);
  // nullptr on the scalar table.
  TileAttentionFn tile_attention = nullptr;
  TilePackFn tile_pack_rows = nullptr;     // K as the columns of Q K^T
  TilePackFn tile_pack_columns = nullptr;  // V^T as the columns of P V
  // The same attention with Q K^T on int8 (attention_i8.h) and its operands' quantizers, for
  // the encoders' self-attention: vpdpbusd on the avx512vnni and avxvnni tables, whose bf16
  // attention runs on FMAs; nullptr on the others (AMX's bf16 tiles and vdpbf16ps are about as
  // fast or faster; plain AVX2 has no 8-bit product without 16-bit saturation).
  TileAttentionFn tile_attention_i8 = nullptr;
  QuantizeQueriesI8Fn quantize_queries_i8 = nullptr;
  PackKeysI8Fn pack_keys_i8 = nullptr;

  RmsNormFn rms_norm = nullptr;
  LayerNormFn layer_norm = nullptr;
  SoftmaxFn softmax = nullptr;
  UnaryFn gelu_tanh = nullptr;   // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), ggml "gelu"
  UnaryFn gelu_erf = nullptr;    // 0.5 x (1 + erf(x / sqrt 2)); SIMD erfc fit: rel. err < 1.2e-7
  UnaryFn gelu_quick = nullptr;  // x * sigmoid(1.702 x) (CLIP)
  UnaryFn silu = nullptr;        // x * sigmoid(x)
  UnaryFn round_f16 = nullptr;   // x rounded to the nearest f16 value (ties to even), as f32
  BinaryFn swiglu = nullptr;     // y = silu(a) * b
  RopeFn rope = nullptr;
  ExpSubSumFn exp_sub_sum = nullptr;
  // Attention over the KV cache, one pair per cache dtype.
  DotRowsFn dot_rows_f32 = nullptr;
  DotRowsFn dot_rows_f16 = nullptr;
  AxpyRowsFn axpy_rows_f32 = nullptr;
  AxpyRowsFn axpy_rows_f16 = nullptr;
};

// The table for `isa` (built on first use). The caller must ensure IsaAvailable(isa) before
// calling any kernel in it.
const KernelTable& GetKernelTable(Isa isa);

// Fillers, one per translation unit; each overwrites the slots it implements. The ref filler
// runs first for every table so that an ISA without a specialised kernel falls back to ref.
void FillRefKernels(KernelTable* t);
void FillAvx2Kernels(KernelTable* t);
void FillAvxVnniKernels(KernelTable* t);  // x86/avxvnni/
void FillAvx512Kernels(KernelTable* t);
void FillAvx512VnniKernels(KernelTable* t);
void FillAvx512Bf16Kernels(KernelTable* t);
void FillAmxKernels(KernelTable* t);  // x86/amx/tile_bf16_amx.cpp
void FillNeonKernels(KernelTable* t);     // arm64/neon/
void FillNeonDotKernels(KernelTable* t);  // arm64/neondot/
void FillNeonI8mmKernels(KernelTable* t);  // arm64/neoni8mm/
void FillHwyKernels(KernelTable* t);  // Highway elementwise kernels for t->isa

}  // namespace vlmd::engine::kernels
