// Scratch and execution resources of one caller of a vision encoder (every ViT family): the
// buffers grow to the largest call seen and are reused; nothing in them carries state from one
// call to the next.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "engine/kernels/kernel_table.h"
#include "engine/ops/matmul.h"

namespace vlmd::engine::models {

// A 64-byte aligned bf16 buffer: tile operands whose 64-byte rows each sit on one cache line.
class Bf16Buffer {
 public:
  void resize(size_t n) { data_ = reinterpret_cast<uint16_t*>(mem_.Reserve(n * sizeof(uint16_t))); }
  uint16_t* data() { return data_; }
  size_t bytes() const { return mem_.capacity(); }

 private:
  ops::MatmulScratch mem_;
  uint16_t* data_ = nullptr;
};

struct VisionContext {
  const kernels::KernelTable* kernels = nullptr;
  ThreadPool* pool = nullptr;  // may be nullptr (single thread)
  ops::MatmulScratch matmul_scratch;
  std::vector<float> patches, x, xn, q, k, v, attn, ff, proj_in, proj_mid;
  // The blocks on tiles (fast precision on AMX): bf16 activation rows between the products.
  Bf16Buffer xn16, q16, k16, v16, attn16, ff16;
  std::vector<float> attention_scratch;  // ops::AttentionArgs::kv_scratch

  // Bytes held by all of the above (memory accounting of the activations).
  uint64_t bytes() const;
};

// Grows v to at least n elements (never shrinks: scratch is reused across calls).
inline void GrowScratch(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

}  // namespace vlmd::engine::models
