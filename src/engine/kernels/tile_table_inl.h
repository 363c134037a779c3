// Tables of register-tile kernels, one per tile shape: a kernel's rows and columns are template
// parameters (so that its accumulators are registers), the driver picks the entry for the shape
// an edge of the output needs.
#pragma once

#include <array>
#include <utility>

namespace vlmd::engine::kernels {

// Compile-time only (the entries are TU-local kernels), so it can live outside the per-ISA
// namespaces. {make.operator()<R, C>() for R in 1..kRows, C in 1..kCols}, row-major: the entry
// of shape (r, c) is at (r - 1) * kCols + (c - 1). `make` returns the kernel's function pointer, e.g.
// []<int R, int C>() { return &Tile<R, C>; }.
template <int kRows, int kCols, typename Make, int... I>
constexpr auto TileTableOf(Make make, std::integer_sequence<int, I...>) {
  return std::array{make.template operator()<I / kCols + 1, I % kCols + 1>()...};
}
template <int kRows, int kCols, typename Make>
constexpr auto TileTable(Make make) {
  return TileTableOf<kRows, kCols>(make, std::make_integer_sequence<int, kRows * kCols>());
}

}  // namespace vlmd::engine::kernels
