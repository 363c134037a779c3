#include "engine/models/vision_context.h"

namespace vlmd::engine::models {

uint64_t VisionContext::bytes() const {
  auto floats = [](const std::vector<float>& v) { return v.capacity() * sizeof(float); };
  uint64_t b = matmul_scratch.capacity();
  for (const std::vector<float>* v : {&patches, &x, &xn, &q, &k, &v, &attn, &ff, &proj_in,
                                      &proj_mid, &attention_scratch}) {
    b += floats(*v);
  }
  for (const Bf16Buffer* buf : {&xn16, &q16, &k16, &v16, &attn16, &ff16}) b += buf->bytes();
  return b;
}

}  // namespace vlmd::engine::models
