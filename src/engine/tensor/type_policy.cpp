// Fallback weight types and GGUF file-type numbers (see type_policy.h).
#include "engine/tensor/type_policy.h"

namespace vlmd::engine {

DType TypeForRowLength(DType wanted, int64_t row_len, bool* fell_back) {
  *fell_back = false;
  if (RowBytes(wanted, row_len)) return wanted;
  *fell_back = true;
  DType alt = DType::kF16;
  switch (wanted) {
    case DType::kQ4_K:
    case DType::kQ5_K: alt = DType::kQ5_0; break;
    case DType::kQ6_K: alt = DType::kQ8_0; break;
    default: alt = DType::kF16; break;
  }
  return RowBytes(alt, row_len) ? alt : DType::kF32;
}

uint32_t GgufFileType(DType type) {
  switch (type) {
    case DType::kF32: return 0;
    case DType::kF16: return 1;
    case DType::kQ4_0: return 2;
    case DType::kQ4_1: return 3;
    case DType::kQ8_0: return 7;
    case DType::kQ5_0: return 8;
    case DType::kQ4_K: return 15;  // Q4_K_M
    case DType::kQ5_K: return 17;  // Q5_K_M
    case DType::kQ6_K: return 18;
    case DType::kBF16: return 32;
    default: return 0;
  }
}

}  // namespace vlmd::engine
