#include "engine/models/vision_context.h"

namespace vlmd::engine::models {

uint64_t VisionContext::bytes() const {
  auto floats = [](const std::vector<float>& v) { return v.capacity() * sizeof(float); };
  uint64_t b = matmul_scratch.capacity();
  for (const std::vector<float>* v : {&patches, &x, &xn, &q, &k, &v, &attn, &ff, &proj_in,
                                      &proj_mid}) {
    b += floats(*v);
  }
  for (const Bf16Buffer* buf : {&xn16, &q16, &k16, &v16, &attn16, &ff16}) b += buf->bytes();
  for (const AttentionWork& w : attention_work) {
    b += floats(w.k_head) + floats(w.v_head) + floats(w.v_head_t) + floats(w.scores) +
         w.q_bf16.bytes() + w.k_tiles.bytes() + w.v_tiles.bytes() + w.o_block.capacity();
  }
  return b;
}

}  // namespace vlmd::engine::models
