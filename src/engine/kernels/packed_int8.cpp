// Packing into the panel layout of packed_int8.h, and the scalar reference packed matmul.
#include "engine/kernels/packed_int8.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/thread_pool.h"
#include "engine/kernels/q8_0_row_inl.h"
#include "engine/tensor/fp16.h"
#include "engine/tensor/quant_blocks.h"
#include "engine/tensor/quant_fit.h"
#include "engine/tensor/quantize.h"

namespace vlmd::engine::kernels {
namespace {

template <typename T>
T* AlignedArray(size_t count) {
  return static_cast<T*>(AllocateLarge(count * sizeof(T)));  // 64-byte aligned
}

// Element e (0..31) of a Q4_0 block: its nibble 0..15 (low nibbles hold 0..15, high 16..31).
inline uint8_t Q4Nibble(const BlockQ4_0& b, int e) {
  return e < 16 ? (b.qs[e] & 0x0F) : (b.qs[e - 16] >> 4);
}

}  // namespace

bool PackedMatrix::CanPack(DType dtype) {
  return dtype == DType::kQ8_0 || dtype == DType::kQ4_0 || dtype == DType::kQ5_0 ||
         dtype == DType::kQ4_K || dtype == DType::kQ5_K || dtype == DType::kQ6_K ||
         dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16 ||
         dtype == DType::kQ5_1 || dtype == DType::kIQ4_NL || dtype == DType::kQ2_K ||
         dtype == DType::kQ3_K || dtype == DType::kIQ4_XS;
}

PackedFormat PackedFormatOf(DType dtype) {
  if (dtype == DType::kQ4_0) return PackedFormat::kQ4;
  if (dtype == DType::kQ4_K) return PackedFormat::kQ4K;
  return PackedFormat::kQ8;
}

size_t PackedMatrix::BytesFor(PackedFormat f, int64_t n, int64_t k) {
  const int64_t g = GroupPanels(f), panels = (n + kPanelCols - 1) / kPanelCols;
  const size_t units = static_cast<size_t>((panels + g - 1) / g * g * ((k + kPackBlock - 1) / kPackBlock));
  const size_t per_scale_set = kPanelCols * sizeof(uint16_t);
  const size_t scale_sets = f == PackedFormat::kQ8Col ? 0 : f == PackedFormat::kQ4K ? 2 : 1;
  const size_t column_scales =
      f == PackedFormat::kQ8Col ? static_cast<size_t>(panels) * kPanelCols * sizeof(float) : 0;
  return units * (QsBytesPerBlock(f) + per_scale_set * scale_sets) + column_scales;
}

namespace {
// A float row's one scale for all of it (kQ8Col) and its quants: the Q8_0 rule over the whole
// row, d = amax / 127, q = round half away (x / d) (0 for a zero row). Returns d. k: a multiple
// of 32 (the zero-padded row).
float QuantizeColumn(const float* x, int64_t k, int8_t* q) {
  // k is whole blocks: 8 running maxima, so that the compiler vectorizes the loop.
  float lane_max[8] = {};
  for (int64_t e0 = 0; e0 < k; e0 += 8) {
    for (int l = 0; l < 8; ++l) lane_max[l] = std::max(lane_max[l], std::fabs(x[e0 + l]));
  }
  const float amax = *std::max_element(lane_max, lane_max + 8);
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int64_t e = 0; e < k; ++e) {
    q[e] = static_cast<int8_t>(std::clamp(quant::RoundHalfAway(x[e] * id), -127, 127));
  }
  return d;
}

// Whether one float row (k values, finite) may take one scale (d, quants q: QuantizeColumn's):
// its squared error then is at most kColumnScaleErrorRatio times that of its Q8_0 blocks
// (`blocks`, the row's quantization), plus a slack of 1e-9 of its energy (rows that Q8_0 blocks
// hold exactly, e.g. all zeros).
bool ColumnScaleFits(const float* x, int64_t k, const BlockQ8_0* blocks, float d, const int8_t* q) {
  double err_column = 0.0, err_blocks = 0.0, energy = 0.0;
  // Each block's sums in f32, in 8 lanes (a loop the compiler vectorizes without reordering a
  // sum: this runs over every float weight at load), the blocks' in f64.
  constexpr int kLanes = 8;
  for (int64_t b = 0; b < k / kPackBlock; ++b) {
    const float* xb = x + b * kPackBlock;
    const int8_t* qc = q + b * kPackBlock;
    const float db = F16ToF32(blocks[b].d);
    float ec[kLanes] = {}, eb[kLanes] = {}, en[kLanes] = {};
    for (int e0 = 0; e0 < kPackBlock; e0 += kLanes) {
      for (int l = 0; l < kLanes; ++l) {
        const float v = xb[e0 + l];
        const float by_column = v - d * static_cast<float>(qc[e0 + l]);
        const float by_block = v - db * static_cast<float>(blocks[b].qs[e0 + l]);
        ec[l] += by_column * by_column;
        eb[l] += by_block * by_block;
        en[l] += v * v;
      }
    }
    for (int l = 0; l < kLanes; ++l) {
      err_column += ec[l];
      err_blocks += eb[l];
      energy += en[l];
    }
  }
  return err_column <= kColumnScaleErrorRatio * err_blocks + 1e-9 * energy;
}
}  // namespace

void PackedMatrix::PackQuants(int64_t col, int64_t block, const int8_t* q) {
  const int j = static_cast<int>(col % kPanelCols);
  uint8_t* qs = qs_.get() + Unit(col / kPanelCols, block) * 512;
  for (int quad = 0; quad < 8; ++quad) {
    for (int e = 0; e < 4; ++e) {
      qs[quad * 64 + j * 4 + e] = static_cast<uint8_t>(q[4 * quad + e] + 128);
    }
  }
}

void PackedMatrix::PackColumnScaled(int64_t col, float d, const int8_t* q) {
  column_scales_.get()[col] = d;
  for (int64_t b = 0; b < blocks(); ++b) PackQuants(col, b, q + b * kPackBlock);
}

void PackedMatrix::PackNibbles(int64_t col, int64_t block, const uint8_t* nibbles) {
  const int64_t p = col / kPanelCols;
  const int j = static_cast<int>(col % kPanelCols);
  uint8_t* qs = qs_.get() + Unit(p, block) * 256;
  for (int c = 0; c < 4; ++c) {
    for (int e = 0; e < 4; ++e) {
      qs[c * 64 + j * 4 + e] =
          static_cast<uint8_t>(nibbles[8 * c + e] | (nibbles[8 * c + 4 + e] << 4));
    }
  }
}

void PackedMatrix::PackColumnQ4(int64_t col, const BlockQ4_0* row) {
  const int64_t p = col / kPanelCols, nb = blocks();
  const int j = static_cast<int>(col % kPanelCols);
  uint8_t nib[32];
  for (int64_t b = 0; b < nb; ++b) {
    for (int e = 0; e < 32; ++e) nib[e] = Q4Nibble(row[b], e);
    PackNibbles(col, b, nib);
    scales_.get()[Unit(p, b) * kPanelCols + j] = row[b].d;
  }
}

void PackedMatrix::PackColumnQ4K(int64_t col, const BlockQ4_K* row) {
  const int64_t p = col / kPanelCols, nb = blocks();
  const int j = static_cast<int>(col % kPanelCols);
  uint8_t nib[32];
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ4_K& sb = row[b / 8];
    const int sub = static_cast<int>(b % 8);
    // Sub-blocks 2i and 2i+1 share 32 bytes of qs: low nibbles, then high nibbles.
    const uint8_t* q = sb.qs + 32 * (sub / 2);
    for (int e = 0; e < 32; ++e) nib[e] = sub % 2 == 0 ? (q[e] & 0x0F) : (q[e] >> 4);
    PackNibbles(col, b, nib);
    uint8_t sc, m;
    quant::UnpackScaleMinK4(sub, sb.scales, &sc, &m);
    const size_t at = Unit(p, b) * kPanelCols + j;
    scales_.get()[at] = F32ToF16(F16ToF32(sb.d) * static_cast<float>(sc));
    mins_.get()[at] = F32ToF16(F16ToF32(sb.dmin) * static_cast<float>(m));
  }
}

void PackedMatrix::PackColumnQ8(int64_t col, const BlockQ8_0* row) {
  const int64_t p = col / kPanelCols, nb = blocks();
  const int j = static_cast<int>(col % kPanelCols);
  for (int64_t b = 0; b < nb; ++b) {
    PackQuants(col, b, row[b].qs);
    scales_.get()[Unit(p, b) * kPanelCols + j] = row[b].d;
  }
}

Result<std::unique_ptr<PackedMatrix>> PackedMatrix::Pack(DType dtype, const void* data,
                                                         size_t row_bytes, int64_t n, int64_t k) {
  const PackSource source{dtype, data, row_bytes, n};
  return PackConcat(std::span<const PackSource>(&source, 1), k);
}

Result<std::unique_ptr<PackedMatrix>> PackedMatrix::PackConcat(std::span<const PackSource> sources,
                                                               int64_t k, ThreadPool* pool) {
  if (sources.empty()) return InvalidArgumentError("PackedMatrix: nothing to pack");
  const PackedFormat format = PackedFormatOf(sources[0].dtype);
  int64_t n = 0;
  bool all_float = true;
  for (const PackSource& s : sources) {
    if (!CanPack(s.dtype)) {
      return InvalidArgumentError("PackedMatrix: cannot pack " + std::string(DTypeName(s.dtype)));
    }
    if (PackedFormatOf(s.dtype) != format) {
      return InvalidArgumentError("PackedMatrix: cannot pack " +
                                  std::string(DTypeName(sources[0].dtype)) + " and " +
                                  std::string(DTypeName(s.dtype)) + " into one matrix");
    }
    const bool float_rows =
        s.dtype == DType::kF32 || s.dtype == DType::kF16 || s.dtype == DType::kBF16;
    all_float = all_float && float_rows;
    if (s.n < 1 || k < 1 || s.data == nullptr) {
      return InvalidArgumentError("PackedMatrix: bad shape n=" + std::to_string(s.n) +
                                  " k=" + std::to_string(k));
    }
    if (!float_rows && k % kPackBlock != 0) {
      return InvalidArgumentError("PackedMatrix: k=" + std::to_string(k) +
                                  " is not a multiple of 32, which " +
                                  std::string(DTypeName(s.dtype)) + " rows must be");
    }
    const auto min_row = RowBytes(s.dtype, k);
    if (!min_row || s.row_bytes < *min_row) {
      return InvalidArgumentError("PackedMatrix: row_bytes " + std::to_string(s.row_bytes) +
                                  " is smaller than a row");
    }
    n += s.n;
  }
  // Column `col`'s source row, by the sources' first columns.
  std::vector<int64_t> first_col;
  for (int64_t c = 0; const PackSource& s : sources) {
    first_col.push_back(c);
    c += s.n;
  }
  struct SourceRow {
    const PackSource* source;
    int64_t row;  // within the source
    const uint8_t* data;
  };
  auto source_row = [&](int64_t col) {
    const size_t i = static_cast<size_t>(
        std::upper_bound(first_col.begin(), first_col.end(), col) - first_col.begin() - 1);
    const PackSource& s = sources[i];
    const int64_t row = col - first_col[i];
    return SourceRow{&s, row, static_cast<const uint8_t*>(s.data) + static_cast<size_t>(row) * s.row_bytes};
  };
  const int64_t nb = (k + kPackBlock - 1) / kPackBlock;
  // A float, Q5_K, Q6_K or read-only format's row's values into f32_row (nb * 32 values: the tail stays zero) and
  // their Q8_0 blocks into q8_row (Q8_0's round-to-nearest); an error names the tensor and row.
  auto quantize_row = [&](const SourceRow& src, std::vector<float>& f32_row,
                          std::vector<BlockQ8_0>& q8_row) {
    Status s = DequantizeRow(src.source->dtype, src.data, f32_row.data(), k);
    if (s.ok()) s = QuantizeRow(DType::kQ8_0, f32_row.data(), q8_row.data(), nb * kPackBlock);
    if (s.ok()) return s;  // e.g. an inf in the file: refused, not packed as garbage
    const std::string_view name = src.source->name;
    return s.WithContext(
        "packing weights to int8 blocks (the fast precision; exact keeps them as they are), " +
        (name.empty() ? std::string("matrix") : "tensor '" + std::string(name) + "'") + " row " +
        std::to_string(src.row));
  };
  // fn(i0, i1, thread) over [0, items): on the pool in a few tasks per thread, handed out as
  // threads free up.
  auto for_ranges = [&](int64_t items, auto&& fn) {
    if (pool == nullptr || pool->size() == 1 || items == 1) return fn(int64_t{0}, items, 0);
    const int64_t tasks = std::min<int64_t>(items, 4 * static_cast<int64_t>(pool->size()));
    pool->ParallelFor(tasks, [&](int64_t t, int thread) {
      fn(items * t / tasks, items * (t + 1) / tasks, thread);
    });
  };
  // An empty matrix of format f (the padding columns' scales, kQ8Col's included, are set by
  // `pack`).
  auto allocate = [&](PackedFormat f) -> Result<std::unique_ptr<PackedMatrix>> {
    static std::atomic<uint64_t> next_serial{1};
    std::unique_ptr<PackedMatrix> pm(new PackedMatrix());
    pm->serial_ = next_serial.fetch_add(1, std::memory_order_relaxed);
    pm->format_ = f;
    pm->from_float_rows_ = all_float;
    pm->n_ = n;
    pm->k_ = k;
    pm->panels_ = (n + kPanelCols - 1) / kPanelCols;
    const size_t units = pm->Units();
    pm->qs_.reset(AlignedArray<uint8_t>(units * pm->qs_bytes_per_block()));
    bool allocated = pm->qs_ != nullptr;
    if (f == PackedFormat::kQ8Col) {
      pm->column_scales_.reset(AlignedArray<float>(static_cast<size_t>(pm->panels_) * kPanelCols));
      allocated = allocated && pm->column_scales_;
    } else {
      pm->scales_.reset(AlignedArray<uint16_t>(units * kPanelCols));
      allocated = allocated && pm->scales_;
    }
    if (f == PackedFormat::kQ4K) {
      pm->mins_.reset(AlignedArray<uint16_t>(units * kPanelCols));
      allocated = allocated && pm->mins_;
    }
    if (!allocated) {
      return ResourceExhaustedError("PackedMatrix: cannot allocate " +
                                    std::to_string(pm->bytes()) + " bytes");
    }
    return pm;
  };
  // Packs every column into pm. Panel groups are independent (each owns a contiguous range of
  // units, see Unit()), so they are packed in parallel: each task first fills its units with the
  // padding values (zero scale, the offset as the weight: padding columns contribute 0), which
  // is also where the fresh pages are first touched, then packs its columns. A 3B model's load
  // was ~15 s on one thread, most of it here and in the kernel zeroing those pages. kQ8Col: a
  // column that fails ColumnScaleFits clears *fits and the packing stops (the caller packs
  // again with Q8_0 blocks).
  auto pack = [&](PackedMatrix* pm, std::atomic<bool>* fits) {
    std::vector<Status> errors(static_cast<size_t>(pool != nullptr ? pool->size() : 1));
    const int64_t group = pm->group_panels(), n_groups = (pm->panels_ + group - 1) / group;
    const size_t units_per_group = static_cast<size_t>(group * nb);
    for_ranges(n_groups, [&](int64_t g0, int64_t g1, int thread) {
      const size_t u0 = static_cast<size_t>(g0) * units_per_group;
      const size_t u1 = static_cast<size_t>(g1) * units_per_group;
      const size_t qs_bytes = pm->qs_bytes_per_block();
      std::memset(pm->qs_.get() + u0 * qs_bytes, HasNibbles(pm->format_) ? 0x88 : 128,
                  (u1 - u0) * qs_bytes);
      if (pm->scales_) {
        std::memset(pm->scales_.get() + u0 * kPanelCols, 0,
                    (u1 - u0) * kPanelCols * sizeof(uint16_t));
      }
      if (pm->mins_) {
        std::memset(pm->mins_.get() + u0 * kPanelCols, 0,
                    (u1 - u0) * kPanelCols * sizeof(uint16_t));
      }
      if (pm->column_scales_) {  // groups of one panel
        std::fill_n(pm->column_scales_.get() + g0 * kPanelCols, (g1 - g0) * kPanelCols, 0.0f);
      }
      std::vector<float> f32_row(static_cast<size_t>(nb * kPackBlock), 0.0f);  // zero-padded tail
      std::vector<BlockQ8_0> q8_row(static_cast<size_t>(nb));
      std::vector<int8_t> column_q;
      if (pm->column_scales_) column_q.resize(static_cast<size_t>(nb * kPackBlock));
      const int64_t c1 = std::min(n, g1 * group * kPanelCols);
      for (int64_t col = g0 * group * kPanelCols; col < c1; ++col) {
        // kQ8Col: another column failed, the matrix is packed again with blocks.
        if (fits != nullptr && !fits->load(std::memory_order_relaxed)) return;
        const SourceRow src = source_row(col);
        const DType dtype = src.source->dtype;
        const uint8_t* row = src.data;
        if (pm->format_ == PackedFormat::kQ4) {
          pm->PackColumnQ4(col, reinterpret_cast<const BlockQ4_0*>(row));
          continue;
        }
        if (pm->format_ == PackedFormat::kQ4K) {
          pm->PackColumnQ4K(col, reinterpret_cast<const BlockQ4_K*>(row));
          continue;
        }
        const BlockQ8_0* blocks = reinterpret_cast<const BlockQ8_0*>(row);
        if (dtype == DType::kQ5_0) {
          // Q5_0 is d * (q - 16) with q in 0..31: the same integers and scale as Q8_0 blocks.
          // Value j < 16 is the low nibble of qs[j], value j + 16 the high one; bit j of qh is
          // the fifth bit of value j.
          const auto* q5 = reinterpret_cast<const BlockQ5_0*>(row);
          for (int64_t b = 0; b < nb; ++b) {
            uint32_t qh;
            std::memcpy(&qh, q5[b].qh, sizeof(qh));
            q8_row[b].d = q5[b].d;
            for (int j = 0; j < 16; ++j) {
              const int lo = (q5[b].qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
              const int hi = (q5[b].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
              q8_row[b].qs[j] = static_cast<int8_t>(lo - 16);
              q8_row[b].qs[j + 16] = static_cast<int8_t>(hi - 16);
            }
          }
          blocks = q8_row.data();
        } else if (dtype == DType::kIQ4_NL) {
          // IQ4_NL is d * kIq4NlValues[q]: every level fits a byte, so it is a Q8_0 block of the
          // same scale (nibbles as in Q4_0: value j < 16 low, j + 16 high).
          const auto* nl = reinterpret_cast<const BlockIQ4_NL*>(row);
          for (int64_t b = 0; b < nb; ++b) {
            q8_row[b].d = nl[b].d;
            for (int j = 0; j < 16; ++j) {
              q8_row[b].qs[j] = kIq4NlValues[nl[b].qs[j] & 0x0F];
              q8_row[b].qs[j + 16] = kIq4NlValues[nl[b].qs[j] >> 4];
            }
          }
          blocks = q8_row.data();
        } else if (dtype != DType::kQ8_0) {  // float rows, Q5_K, Q6_K, the read-only formats
          Status s = quantize_row(src, f32_row, q8_row);
          if (!s.ok()) {
            errors[static_cast<size_t>(thread)] = std::move(s);
            return;
          }
          blocks = q8_row.data();
        }
        if (pm->format_ == PackedFormat::kQ8Col) {
          const int64_t kp = nb * kPackBlock;
          const float d = QuantizeColumn(f32_row.data(), kp, column_q.data());
          if (!ColumnScaleFits(f32_row.data(), kp, q8_row.data(), d, column_q.data())) {
            fits->store(false, std::memory_order_relaxed);
            return;
          }
          pm->PackColumnScaled(col, d, column_q.data());
          continue;
        }
        pm->PackColumnQ8(col, blocks);
      }
    });
    for (Status& s : errors) {
      if (!s.ok()) return s;
    }
    return Status::Ok();
  };
  // Float rows: one scale per column when every column passes ColumnScaleFits (packed at once,
  // with Q8_0 blocks again in the rare case that one does not).
  if (all_float) {
    VLMD_ASSIGN_OR_RETURN(std::unique_ptr<PackedMatrix> pm, allocate(PackedFormat::kQ8Col));
    std::atomic<bool> fits{true};
    VLMD_RETURN_IF_ERROR(pack(pm.get(), &fits));
    if (fits.load()) return pm;
  }
  VLMD_ASSIGN_OR_RETURN(std::unique_ptr<PackedMatrix> pm, allocate(format));
  VLMD_RETURN_IF_ERROR(pack(pm.get(), nullptr));
  return pm;
}

void PackedToTilesRef(const PackedMatrix& w, int64_t p0, int64_t p1, uint16_t* dst) {
  const int64_t k = w.k();
  // Panels are k * 16 values apart: a zero-padded last block would write into the next one.
  VLMD_CHECK_MSG(k % kPackBlock == 0, "PackedToTiles needs k to be a multiple of 32");
  const bool q4 = HasNibbles(w.format());
  for (int64_t p = p0; p < p1; ++p) {
    uint16_t* panel = dst + (p - p0) * k * kPanelCols;
    for (int64_t b = 0; b < w.blocks(); ++b) {
      const uint8_t* qs = w.qs(p, b);
      const uint16_t* scales = w.scales(p, b);
      const uint16_t* mins = w.mins(p, b);
      for (int j = 0; j < kPanelCols; ++j) {
        const float d = w.format() == PackedFormat::kQ8Col ? w.column_scales(p)[j]
                                                           : F16ToF32(scales[j]);
        for (int i = 0; i < kPackBlock; ++i) {
          int u;  // the stored value of column j, element 32 b + i (layout: packed_int8.h)
          if (q4) {
            const uint8_t byte = qs[(i / 8) * 64 + j * 4 + i % 4];
            u = (i % 8) < 4 ? (byte & 0x0F) : (byte >> 4);
          } else {
            u = qs[(i / 4) * 64 + j * 4 + i % 4];
          }
          // d (u - offset) is exact in f32; as an fma a zero comes out +0 for either sign of d.
          // (0 - mn, not -mn: a min of +0 gives a +0 bias, as the SIMD version's subtraction.)
          const float bias = mins != nullptr ? 0.0f - F16ToF32(mins[j])
                                             : -static_cast<float>(w.offset()) * d;
          const float v = std::fma(static_cast<float>(u), d, bias);
          const int64_t e = b * kPackBlock + i;
          // Tile row e / 2 holds the pairs (e, e + 1) of the 16 columns.
          panel[(e / 2) * 2 * kPanelCols + j * 2 + e % 2] = F32ToBF16(v);
        }
      }
    }
  }
}

void SumQ8_0Blocks(const void* row, int64_t k, int32_t* sums) {
  const auto* blocks = static_cast<const BlockQ8_0*>(row);
  for (int64_t b = 0; b < k / kPackBlock; ++b) {
    int32_t s = 0;
    for (int e = 0; e < kPackBlock; ++e) s += blocks[b].qs[e];
    sums[b] = s;
  }
}

void ConvertQ8_0SumsRef(const float* x, void* y, int32_t* sums, int64_t k) {
  auto whole_blocks = [](const float* whole, void* out, int32_t* out_sums, int64_t n) {
    FindActivationQuantizeFn(DType::kQ8_0)(whole, out, n);
    SumQ8_0Blocks(out, n, out_sums);
  };
  ConvertQ8_0SumsRow(x, y, sums, k, whole_blocks);
}

void PackedMatmulRef(const PackedMatmulArgs& args, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  const PackedMatrix& w = *args.w;
  const int64_t nb = w.blocks();
  const bool q4 = HasNibbles(w.format());
  const bool column_scales = w.format() == PackedFormat::kQ8Col;
  for (int64_t m = m0; m < m1; ++m) {
    const auto* a = reinterpret_cast<const BlockQ8_0*>(args.a + m * args.a_row_bytes);
    const int32_t* sums = args.a_sums + m * nb;
    for (int64_t p = p0; p < p1; ++p) {
      for (int j = 0; j < kPanelCols; ++j) {
        const int64_t col = p * kPanelCols + j;
        if (col >= w.n()) break;
        float acc = 0.0f;
        for (int64_t b = 0; b < nb; ++b) {
          const uint8_t* qs = w.qs(p, b);
          int32_t dot = -w.offset() * sums[b];
          for (int e = 0; e < kPackBlock; ++e) {
            int u;
            if (q4) {
              const int c = e / 8, r = e % 4;
              const uint8_t byte = qs[c * 64 + j * 4 + r];
              u = (e % 8) < 4 ? (byte & 0x0F) : (byte >> 4);
            } else {
              u = qs[(e / 4) * 64 + j * 4 + e % 4];
            }
            dot += u * a[b].qs[e];
          }
          const float da = F16ToF32(a[b].d);
          if (column_scales) {  // the column's scale once, below
            acc = std::fma(static_cast<float>(dot), da, acc);
            continue;
          }
          const float d = F16ToF32(w.scales(p, b)[j]) * da;
          acc = std::fma(static_cast<float>(dot), d, acc);  // as the kernels do
          if (w.mins(p, b) != nullptr) {  // kQ4K: - mn * (da * sum(a))
            const float da_sum = da * static_cast<float>(sums[b]);
            acc = std::fma(-F16ToF32(w.mins(p, b)[j]), da_sum, acc);
          }
        }
        if (column_scales) acc *= w.column_scales(p)[j];
        args.out[m * args.out_stride + col] = acc;
      }
    }
  }
}

}  // namespace vlmd::engine::kernels
