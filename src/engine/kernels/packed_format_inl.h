// The dispatch of a packed int8 matmul kernel on its matrix's format (every architecture's
// packed kernels take the format as a template parameter).
#pragma once

#include <cstdint>

#include "engine/kernels/packed_int8.h"
#include "engine/tensor/quant_blocks.h"

namespace vlmd::engine::kernels {
// Internal linkage: the including translation units are compiled with different ISA flags.
namespace {

// Calls fn.template operator()<kFmt>() with the format as an int (kQ8 0, kQ4 1, kQ4K 2,
// kQ8Col 3).
template <typename Fn>
inline void ForPackedFormat(PackedFormat format, Fn&& fn) {
  switch (format) {
    case PackedFormat::kQ8: return fn.template operator()<0>();
    case PackedFormat::kQ4: return fn.template operator()<1>();
    case PackedFormat::kQ4K: return fn.template operator()<2>();
    case PackedFormat::kQ8Col: return fn.template operator()<3>();
  }
}

// What the kernels ask of a format given as that int.
constexpr bool FormatHasNibbles(int fmt) { return HasNibbles(static_cast<PackedFormat>(fmt)); }
constexpr bool FormatHasMins(int fmt) { return fmt == 2; }
// kQ8Col: one f32 scale per column (PackedMatrix::column_scales), applied after the k loop; the
// blocks' dots are summed with the activation scales only (PackedMatmulRef's order).
constexpr bool FormatHasColumnScales(int fmt) { return fmt == 3; }

// The MR activation rows of a tile from row m: each row's Q8_0 blocks and block sums (nb of each,
// nb = the matrix's blocks per row).
template <int MR>
inline void ActivationRows(const PackedMatmulArgs& args, int64_t m, int64_t nb,
                           const BlockQ8_0* (&a)[MR], const int32_t* (&sums)[MR]) {
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    a[i] = reinterpret_cast<const BlockQ8_0*>(args.a + (m + i) * args.a_row_bytes);
    sums[i] = args.a_sums + (m + i) * nb;
  }
}

}  // namespace
}  // namespace vlmd::engine::kernels
