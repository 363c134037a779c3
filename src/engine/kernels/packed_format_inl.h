// The dispatch of a packed int8 matmul kernel on its matrix's format (every architecture's
// packed kernels take the format as a template parameter).
#pragma once

#include "engine/kernels/packed_int8.h"

namespace vlmd::engine::kernels {
// Internal linkage: the including translation units are compiled with different ISA flags.
namespace {

// Calls fn.template operator()<kFmt>() with the format as an int (kQ8 0, kQ4 1, kQ4K 2).
template <typename Fn>
inline void ForPackedFormat(PackedFormat format, Fn&& fn) {
  switch (format) {
    case PackedFormat::kQ8: return fn.template operator()<0>();
    case PackedFormat::kQ4: return fn.template operator()<1>();
    case PackedFormat::kQ4K: return fn.template operator()<2>();
  }
}

}  // namespace
}  // namespace vlmd::engine::kernels
