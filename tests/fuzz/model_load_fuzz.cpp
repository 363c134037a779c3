// libFuzzer target: the model loaders and one forward pass on GGUF files that are well formed but
// say something other than what the model is (SPEC E1: a hostile file gives an error, never a
// crash). Byte-level mutation rarely gets a GGUF past the reader with all of a model's tensors, so
// this target is structure-aware: the input picks one of the parity fixtures (a text model or an
// mmproj of each family) and a few edits, the file is written again with them, and the result is
// loaded and, when it loads, run:
//   - a metadata value replaced by one of its own type (integers and floats from values that
//     break arithmetic: 0, -1, huge, NaN; a numeric array truncated or one element replaced;
//     a string from the names the loaders switch on), a key removed, or a known key added;
//   - a tensor's dimension changed, its type changed (its bytes zero or all-ones: NaN), or the
//     tensor removed.
// A text model that loads prefills three tokens and decodes one; an mmproj that loads encodes an
// image of a fuzzed size. Errors are the expected outcome; ASan, UBSan, a trap or an allocation
// past libFuzzer's limits is a finding.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/gguf/gguf_reader.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/kernels/kernel_table.h"
#include "engine/models/kv_cache.h"
#include "engine/models/text_decoder.h"
#include "engine/models/vision_context.h"
#include "engine/models/vision_encoder.h"
#include "engine/tensor/dtype.h"

namespace {

namespace gguf = vlmd::engine::gguf;
namespace models = vlmd::engine::models;
using vlmd::engine::DType;

// The fixtures (tests/fixtures, the repository's copy): the quantized text files (smaller, and
// their matrices take the packed and K-quant paths) and every mmproj.
constexpr const char* kFiles[] = {
    "tiny-smolvlm/text-q4_0.gguf", "tiny-smolvlm/mmproj.gguf",  "tiny-llava/text-q8_0.gguf",
    "tiny-llava/mmproj.gguf",      "tiny-llava16/text-q4_k.gguf", "tiny-llava16/mmproj.gguf",
    "tiny-qwen2vl/text-q4_k.gguf", "tiny-qwen2vl/mmproj.gguf",  "tiny-qwen25vl/text-q4_k.gguf",
    "tiny-qwen25vl/mmproj.gguf",   "tiny-qwen3vl/text-q4_k.gguf", "tiny-qwen3vl/mmproj.gguf",
    "tiny-gemma3/text-q4_k.gguf",  "tiny-gemma3/mmproj.gguf",   "tiny-internvl/text-q4_k.gguf",
    "tiny-internvl/mmproj.gguf",
};
constexpr size_t kNumFiles = sizeof(kFiles) / sizeof(kFiles[0]);

// Keys a file may lack that the loaders read when present.
constexpr const char* kExtraKeys[] = {
    "clip.vision.image_grid_pinpoints", "clip.vision.feature_layer", "clip.vision.window_size",
    "clip.vision.n_wa_pattern",         "clip.vision.is_deepstack_layers",
    "clip.vision.projector.scale_factor", "clip.vision.image_min_pixels",
    "clip.vision.image_max_pixels",     "clip.vision.spatial_merge_size",
    "llama.rope.dimension_sections",    "qwen2vl.rope.dimension_sections",
    "gemma3.attention.sliding_window",  "gemma3.final_logit_softcapping",
    "llama.rope.scaling.factor",        "llama.attention.key_length",
    "general.alignment",
};

const std::string& SourceDir() {
  static const std::string dir = [] {
    const char* env = std::getenv("VLMD_SOURCE_DIR");
    return std::string(env != nullptr ? env : VLMD_FUZZ_SOURCE_DIR);
  }();
  return dir;
}

// Each fixture parsed once (nullptr when it is missing: that input does nothing).
const gguf::GgufFile* Base(size_t i) {
  static std::map<size_t, std::unique_ptr<gguf::GgufFile>> files;
  auto it = files.find(i);
  if (it == files.end()) {
    auto f = gguf::GgufFile::Open(SourceDir() + "/tests/fixtures/" + kFiles[i]);
    it = files.emplace(i, f.ok() ? std::move(*f) : nullptr).first;
  }
  return it->second.get();
}

int64_t InterestingInt(FuzzedDataProvider& in, int64_t was) {
  const auto wrap = [](uint64_t x) { return static_cast<int64_t>(x); };  // no signed overflow here
  switch (in.ConsumeIntegralInRange(0, 9)) {
    case 0: return 0;
    case 1: return -1;
    case 2: return 1;
    case 3: return wrap(static_cast<uint64_t>(was) + 1);
    case 4: return wrap(static_cast<uint64_t>(was) - 1);
    case 5: return wrap(static_cast<uint64_t>(was) * 2);
    case 6: return int64_t{1} << in.ConsumeIntegralInRange(8, 62);
    case 7: return std::numeric_limits<int32_t>::max();
    case 8: return std::numeric_limits<int64_t>::min();
    default: return in.ConsumeIntegral<int64_t>();
  }
}

double InterestingFloat(FuzzedDataProvider& in, double was) {
  switch (in.ConsumeIntegralInRange(0, 7)) {
    case 0: return 0.0;
    case 1: return -was;
    case 2: return std::numeric_limits<double>::quiet_NaN();
    case 3: return std::numeric_limits<double>::infinity();
    case 4: return 1e30;
    case 5: return 1e-30;
    case 6: return was * 1000;
    default: return in.ConsumeFloatingPoint<double>();
  }
}

std::string InterestingString(FuzzedDataProvider& in) {
  static const char* kNames[] = {"llama", "qwen2", "qwen2vl", "qwen3vl", "qwen3vlmoe", "gemma3",
                                 "internlm2", "phi3", "qwen3", "clip", "mlp", "idefics3",
                                 "qwen2vl_merger", "qwen2.5vl_merger", "qwen3vl_merger", "internvl",
                                 "gemma3", "gpt2", "", "bicubic"};
  if (in.ConsumeBool()) return kNames[in.ConsumeIntegralInRange<size_t>(0, std::size(kNames) - 1)];
  return in.ConsumeRandomLengthString(16);
}

size_t ScalarBytes(gguf::ValueType t) {
  switch (t) {
    case gguf::ValueType::kUint8: case gguf::ValueType::kInt8: case gguf::ValueType::kBool: return 1;
    case gguf::ValueType::kUint16: case gguf::ValueType::kInt16: return 2;
    case gguf::ValueType::kUint32: case gguf::ValueType::kInt32: case gguf::ValueType::kFloat32: return 4;
    case gguf::ValueType::kUint64: case gguf::ValueType::kInt64: case gguf::ValueType::kFloat64: return 8;
    default: return 0;  // strings, arrays
  }
}

bool IsFloat(gguf::ValueType t) {
  return t == gguf::ValueType::kFloat32 || t == gguf::ValueType::kFloat64;
}

// `v` changed, of its own type; `keep` holds bytes a changed array points into.
gguf::MetadataValue Mutated(FuzzedDataProvider& in, gguf::MetadataValue v,
                            std::deque<std::vector<uint8_t>>* keep) {
  if (v.type == gguf::ValueType::kString) {
    keep->emplace_back();
    const std::string s = InterestingString(in);
    keep->back().assign(s.begin(), s.end());
    v.str = std::string_view(reinterpret_cast<const char*>(keep->back().data()), keep->back().size());
    return v;
  }
  if (v.type == gguf::ValueType::kArray) {
    const size_t elem = ScalarBytes(v.array_type);
    if (elem == 0) return v;  // arrays of strings: the tokenizer's own fuzzer covers them
    if (in.ConsumeBool()) {   // truncated
      v.array_count = in.ConsumeIntegralInRange<uint64_t>(0, v.array_count);
      v.array_bytes = v.array_bytes.first(v.array_count * elem);
      return v;
    }
    if (v.array_count == 0) return v;
    keep->emplace_back(v.array_bytes.begin(), v.array_bytes.end());
    uint8_t* e = keep->back().data() + elem * in.ConsumeIntegralInRange<uint64_t>(0, v.array_count - 1);
    if (v.array_type == gguf::ValueType::kFloat32) {
      const float f = static_cast<float>(InterestingFloat(in, 1.0));
      std::memcpy(e, &f, 4);
    } else {
      const int64_t x = InterestingInt(in, 1);
      std::memcpy(e, &x, elem);  // little-endian: the low bytes
    }
    v.array_bytes = keep->back();
    return v;
  }
  if (IsFloat(v.type)) {
    v.f = InterestingFloat(in, v.f);
  } else if (v.type == gguf::ValueType::kBool) {
    v.u = v.i = in.ConsumeBool();
  } else {
    const size_t bits = 8 * ScalarBytes(v.type);
    int64_t x = InterestingInt(in, v.i);
    if (bits < 64) x &= (int64_t{1} << bits) - 1;  // what the type can hold (sign bits dropped)
    v.i = x;
    v.u = static_cast<uint64_t>(x);
    if (v.type == gguf::ValueType::kInt8) v.i = static_cast<int8_t>(x);
    if (v.type == gguf::ValueType::kInt16) v.i = static_cast<int16_t>(x);
    if (v.type == gguf::ValueType::kInt32) v.i = static_cast<int32_t>(x);
  }
  return v;
}

struct TensorEdit {
  bool drop = false;
  DType type;
  int64_t ne[4];
  int n_dims;
  bool changed = false;
  uint8_t fill = 0;  // the bytes of a changed tensor
};

// The file `base` with the edits the input asks for; nullptr when the writer refuses them.
std::unique_ptr<gguf::GgufFile> Edited(const gguf::GgufFile& base, FuzzedDataProvider& in) {
  const auto& kv = base.metadata();
  const auto& tensors = base.tensors();
  std::vector<gguf::MetadataValue> values;
  std::vector<bool> dropped_key(kv.size(), false);
  for (const auto& e : kv) values.push_back(e.value);
  std::vector<TensorEdit> edits(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    edits[i].type = tensors[i].type;
    std::copy_n(tensors[i].ne, 4, edits[i].ne);
    edits[i].n_dims = tensors[i].n_dims;
  }
  std::deque<std::vector<uint8_t>> keep;
  std::vector<std::pair<std::string, int64_t>> added;
  const int n_edits = in.ConsumeIntegralInRange(0, 4);
  for (int k = 0; k < n_edits && in.remaining_bytes() > 0; ++k) {
    switch (in.ConsumeIntegralInRange(0, 5)) {
      case 0: case 1: {  // a value (twice as likely as the rest)
        const size_t i = in.ConsumeIntegralInRange<size_t>(0, kv.size() - 1);
        if (kv[i].key == "general.alignment") break;  // the writer owns it
        values[i] = Mutated(in, values[i], &keep);
        break;
      }
      case 2:
        dropped_key[in.ConsumeIntegralInRange<size_t>(0, kv.size() - 1)] = true;
        break;
      case 3:
        added.emplace_back(kExtraKeys[in.ConsumeIntegralInRange<size_t>(0, std::size(kExtraKeys) - 2)],
                           InterestingInt(in, 4));
        break;
      case 4: {  // a dimension
        if (tensors.empty()) break;
        TensorEdit& t = edits[in.ConsumeIntegralInRange<size_t>(0, tensors.size() - 1)];
        const int d = in.ConsumeIntegralInRange(0, 3);
        // (Never below 0: a range's bounds must stay ordered for a later edit of it.)
        t.ne[d] = in.ConsumeBool() ? std::max<int64_t>(0, t.ne[d] + in.ConsumeIntegralInRange(-2, 2))
                                   : in.ConsumeIntegralInRange<int64_t>(0, 2 * t.ne[d] + 1);
        t.n_dims = std::max(t.n_dims, d + 1);
        t.changed = true;
        t.fill = in.ConsumeBool() ? 0xff : 0;
        break;
      }
      default: {  // a type, or the tensor gone
        if (tensors.empty()) break;
        TensorEdit& t = edits[in.ConsumeIntegralInRange<size_t>(0, tensors.size() - 1)];
        static constexpr DType kTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0,
                                           DType::kQ4_0, DType::kQ4_K, DType::kQ2_K};
        if (in.ConsumeBool()) {
          t.drop = true;
        } else {
          t.type = kTypes[in.ConsumeIntegralInRange<size_t>(0, std::size(kTypes) - 1)];
          t.changed = true;
          t.fill = in.ConsumeBool() ? 0xff : 0;
        }
        break;
      }
    }
  }
  gguf::GgufWriter w;
  for (size_t i = 0; i < kv.size(); ++i) {
    if (!dropped_key[i] && kv[i].key != "general.alignment") w.SetValue(kv[i].key, values[i]);
  }
  for (const auto& [key, value] : added) w.SetI32(key, static_cast<int32_t>(value));
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorEdit& t = edits[i];
    if (t.drop) continue;
    std::span<const int64_t> ne(t.ne, static_cast<size_t>(t.n_dims));
    if (!t.changed) {
      if (!w.AddTensorView(tensors[i].name, t.type, ne, {tensors[i].data, tensors[i].nbytes}).ok()) return nullptr;
      continue;
    }
    int64_t elements = 1;
    for (int64_t x : ne) {
      if (x < 0 || (x > 0 && elements > (int64_t{1} << 24) / x)) return nullptr;  // a few MB at most
      elements *= x;
    }
    const auto bytes = vlmd::engine::RowBytes(t.type, elements);
    if (!bytes) return nullptr;
    keep.emplace_back(*bytes, t.fill);
    if (!w.AddTensorView(tensors[i].name, t.type, ne, keep.back()).ok()) return nullptr;
  }
  auto f = gguf::GgufFile::FromBytes(w.WriteBytes());
  return f.ok() ? std::move(*f) : nullptr;
}

// How far the inputs get (VLMD_FUZZ_STATS=1 prints them at exit): edits the writer refused,
// files that loaded, models that ran. A target whose files never load tests nothing.
struct Outcomes {
  uint64_t refused = 0, failed_load = 0, loaded = 0, ran = 0;
  ~Outcomes() {
    if (std::getenv("VLMD_FUZZ_STATS") == nullptr) return;
    std::fprintf(stderr, "model_load_fuzz: edits refused %llu, loads failed %llu, loaded %llu, ran %llu\n",
                 static_cast<unsigned long long>(refused), static_cast<unsigned long long>(failed_load),
                 static_cast<unsigned long long>(loaded), static_cast<unsigned long long>(ran));
  }
};
Outcomes g_outcomes;

vlmd::ThreadPool& Pool() {
  static vlmd::ThreadPool pool(1);
  return pool;
}

const vlmd::engine::kernels::KernelTable& Kernels() {
  static const vlmd::engine::kernels::KernelTable& kt = [] () -> const auto& {
    auto isa = vlmd::engine::kernels::SelectIsa();
    return vlmd::engine::kernels::GetKernelTable(isa.ok() ? *isa : vlmd::engine::kernels::Isa::kRef);
  }();
  return kt;
}

void RunText(std::shared_ptr<const gguf::GgufFile> file, const vlmd::engine::ops::WeightPacking& packing,
             FuzzedDataProvider& in) {
  auto model = models::TextDecoder::Load(std::move(file), packing, 64);
  if (!model.ok()) {
    ++g_outcomes.failed_load;
    return;
  }
  ++g_outcomes.loaded;
  const models::TextDecoder& m = **model;
  const int64_t n_vocab = m.config().n_vocab;
  if (n_vocab < 1) __builtin_trap();  // a loaded model has a vocabulary
  auto cache = m.NewCache(64, 8);
  models::ForwardContext ctx;
  ctx.kernels = &Kernels();
  ctx.pool = &Pool();
  models::KvCache* caches[] = {cache.get()};
  std::vector<int32_t> tokens(3), slots = {0, 1, 2}, seq(3, 0);
  for (int32_t& t : tokens) t = static_cast<int32_t>(in.ConsumeIntegralInRange<int64_t>(0, n_vocab - 1));
  const int32_t last = 2;
  std::vector<float> logits(static_cast<size_t>(n_vocab));
  models::ForwardBatch prompt{.n_tokens = 3, .tokens = tokens.data(), .slot = slots.data(),
                              .seq = seq.data(), .logit_rows = &last, .n_logit_rows = 1, .prompt = true};
  if (!m.Forward(prompt, caches, &ctx, logits.data()).ok()) return;
  const int32_t slot = 3, row = 0;
  models::ForwardBatch step{.n_tokens = 1, .tokens = tokens.data(), .slot = &slot, .seq = seq.data(),
                            .logit_rows = &row, .n_logit_rows = 1};
  if (m.Forward(step, caches, &ctx, logits.data()).ok()) ++g_outcomes.ran;
}

void RunVision(std::shared_ptr<const gguf::GgufFile> file, const vlmd::engine::ops::WeightPacking& packing,
               FuzzedDataProvider& in) {
  auto encoder = models::VisionEncoder::Load(std::move(file), packing);
  if (!encoder.ok()) {
    ++g_outcomes.failed_load;
    return;
  }
  ++g_outcomes.loaded;
  const models::VisionEncoder& e = **encoder;
  const int32_t width = in.ConsumeIntegralInRange(1, 160), height = in.ConsumeIntegralInRange(1, 160);
  std::vector<uint8_t> rgb(static_cast<size_t>(width) * height * 3);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>(i * 7 + width);
  const int32_t level = in.ConsumeIntegralInRange(0, std::max(0, e.MaxShrinkLevel(width, height)));
  const models::ImagePlan plan = e.PlanImage(width, height, level);
  // A plan of more rows than a small model could ever be asked for is the loader's to refuse;
  // bounded here so that the input does not spend its time on a legal but huge image.
  if (plan.rows > 4096 || plan.work_units > 64) return;
  auto pre = e.Preprocess({width, height, rgb}, plan);
  if (!pre.ok()) return;
  models::VisionContext ctx;
  ctx.kernels = &Kernels();
  ctx.pool = &Pool();
  std::vector<float> out(static_cast<size_t>(e.ImageTokens(*pre) * e.n_embd()));
  if (e.EncodeImage(*pre, &ctx, out.data()).ok()) ++g_outcomes.ran;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const size_t which = in.ConsumeIntegralInRange<size_t>(0, kNumFiles - 1);
  const gguf::GgufFile* base = Base(which);
  if (base == nullptr || base->metadata().empty()) return 0;
  vlmd::engine::ops::WeightPacking packing;
  packing.pool = &Pool();
  if (in.ConsumeBool()) {  // packed for the int8 kernels, as the server's fast precision does
    packing.kt = &Kernels();
    packing.precision = vlmd::engine::ops::Precision::kFast;
  }
  std::shared_ptr<const gguf::GgufFile> file = Edited(*base, in);
  if (file == nullptr) {
    ++g_outcomes.refused;
    return 0;
  }
  if (which % 2 == 0) {
    RunText(std::move(file), packing, in);
  } else {
    RunVision(std::move(file), packing, in);
  }
  return 0;
}
