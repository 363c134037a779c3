// Text-decoder parity with llama.cpp on the fixtures (tests/fixtures, see its README; llama,
// qwen2vl with M-RoPE, qwen3vl with interleaved M-RoPE, q/k norms and deepstack): the golden
// prompt chunks are fed as given (text token ids, and for image cases the golden image
// embeddings injected at their positions), then the last-position logits must be within the
// stated NMSE of llama.cpp's, and greedy decoding must give the same ids (base: all 16; quantized:
// teacher-forced at every step whose golden top-1/top-2 gap is >= 1.0).
// Each case runs on the GGUF row layout; the Q8_0 / Q4_0 variants also on the packed int8 layout
// (exact precision: the same arithmetic), and the float base model in fast precision (its
// matrices as int8 blocks), held to the quantized tolerance and gap rule. Both need a CPU with
// the packed matmul (else skipped).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "engine/gguf/gguf_reader.h"
#include "engine/models/text_decoder.h"
#include "fixture_json.h"
#include "test_util.h"

namespace vlmd::engine::models {
namespace {

using nlohmann::json;

struct ParityCase {
  std::string fixture;
  std::string name;
  std::string variant;  // base | q8_0 | q4_0 | q4_k
  std::string layout;   // gguf (no packing) | packed (exact precision) | fast
};

void PrintTo(const ParityCase& c, std::ostream* os) {
  *os << c.fixture << "/" << c.name << " " << c.variant << " " << c.layout;
}

std::string CaseName(const ::testing::TestParamInfo<ParityCase>& info) {
  std::string s = info.param.fixture + "_" + info.param.name + "_" + info.param.variant + "_" +
                  info.param.layout;
  for (char& ch : s) {
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return s;
}

json LoadGolden(const std::string& fixture, std::string* error) {
  return vlmd::testing::ReadFixtureJson(fixture + "/golden.json", error);
}

class LlamaParityTest : public ::testing::TestWithParam<ParityCase> {
 protected:
  void SetUp() override {
    auto isa = kernels::SelectIsa();
    ASSERT_TRUE(isa.ok()) << isa.status().ToString();
    ctx_.kernels = &kernels::GetKernelTable(*isa);
    pool_ = std::make_unique<ThreadPool>(2);
    ctx_.pool = pool_.get();
  }

  // Prefills the golden chunks of `c` in one batch. M-RoPE models (golden chunks with pos_start)
  // get llama.cpp's positions (FAMILIES.md): a text token p -> [p, p, p, p]; image token k of a
  // gw x gh grid starting at p0 -> [p0, p0 + k / gw, p0 + k % gw, 0].
  void Prefill(const json& c, const TextDecoder& model, KvCache* cache, std::vector<float>* logits) {
    const int64_t d = model.config().n_embd_inp();
    const bool mrope = model.config().multi_rope();
    std::vector<int32_t> tokens, slot, seq, rope_pos;
    std::vector<float> embd;
    std::vector<engine::ops::RowSpan> image_spans;  // Gemma 3: an image's rows see each other
    for (const json& ch : c["chunks"]) {
      if (mrope) {
        ASSERT_TRUE(ch.contains("pos_start")) << "M-RoPE golden chunk without pos_start";
      }
      const int32_t p0 = mrope ? ch["pos_start"].get<int32_t>() : 0;
      if (ch["type"] == "text") {
        int32_t p = p0;
        for (int32_t t : ch["tokens"].get<std::vector<int32_t>>()) {
          tokens.push_back(t);
          embd.resize(embd.size() + d, 0.0f);
          rope_pos.insert(rope_pos.end(), {p, p, p, p});
          ++p;
        }
      } else {
        if (mrope) {
          const int32_t gw = ch["grid"][0].get<int32_t>();
          for (int32_t k = 0; k < ch["n_tokens"].get<int32_t>(); ++k) {
            rope_pos.insert(rope_pos.end(), {p0, p0 + k / gw, p0 + k % gw, 0});
          }
        }
        std::vector<float> e = vlmd::testing::ReadF32File(vlmd::testing::FixturePath(
            GetParam().fixture + "/" + ch["embd_file"].get<std::string>()));
        const int64_t n = ch["n_tokens"].get<int64_t>();
        ASSERT_EQ(static_cast<int64_t>(e.size()), n * d) << ch["embd_file"];
        image_spans.push_back({static_cast<int64_t>(tokens.size()), n});
        for (int64_t i = 0; i < n; ++i) tokens.push_back(-1);
        embd.insert(embd.end(), e.begin(), e.end());
      }
    }
    ASSERT_EQ(static_cast<int64_t>(tokens.size()), c["n_prompt_tokens"].get<int64_t>());
    const int64_t n = static_cast<int64_t>(tokens.size());
    for (int64_t i = 0; i < n; ++i) {
      slot.push_back(static_cast<int32_t>(i));
      seq.push_back(0);
    }
    const int32_t last = static_cast<int32_t>(n - 1);
    ForwardBatch b{n, tokens.data(), embd.data(), slot.data(), seq.data(), &last, 1};
    b.prompt = true;  // in fast precision on AMX: the tile route, as VlmEngine's prompts
    if (model.config().gemma3) b.bidirectional = image_spans;
    if (mrope) {
      b.rope_pos = rope_pos.data();
      b.rope_pos_per_row = 4;
    }
    KvCache* caches[] = {cache};
    logits->resize(model.config().n_vocab);
    Status s = model.Forward(b, caches, &ctx_, logits->data());
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  ForwardContext ctx_;
  std::unique_ptr<ThreadPool> pool_;
};

TEST_P(LlamaParityTest, LogitsAndGreedyMatchReference) {
  const ParityCase& pc = GetParam();
  std::string error;
  const json golden = LoadGolden(pc.fixture, &error);
  ASSERT_TRUE(error.empty()) << error;
  const json* c = nullptr;
  for (const json& x : golden["cases"]) {
    if (x["name"] == pc.name) c = &x;
  }
  ASSERT_NE(c, nullptr);
  const json& v = (*c)["variants"][pc.variant];
  auto file = gguf::GgufFile::Open(vlmd::testing::FixturePath(pc.fixture + "/" + v["model"].get<std::string>()));
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  ops::WeightPacking packing;
  if (pc.layout != "gguf") {
    if (ctx_.kernels->packed_matmul == nullptr) GTEST_SKIP() << "no packed int8 matmul on this CPU";
    packing = {ctx_.kernels, pc.layout == "fast" ? ops::Precision::kFast : ops::Precision::kExact};
  }
  auto model = TextDecoder::Load(std::shared_ptr<const gguf::GgufFile>(std::move(*file)), packing);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  if (pc.layout != "gguf") {
    ASSERT_GT((*model)->packed_matrices(), 0u) << "nothing was packed";
    // The packed matrices' GGUF pages were dropped (the parity below then also shows that the
    // model never reads them again, or reads back the same bytes).
    EXPECT_GT((*model)->released_bytes(), 0u);
  }
  auto cache = (*model)->NewCache(256);

  std::vector<float> logits;
  Prefill(*c, **model, cache.get(), &logits);
  if (HasFatalFailure()) return;
  const std::vector<float> ref = vlmd::testing::ReadF32File(
      vlmd::testing::FixturePath(pc.fixture + "/" + v["logits_file"].get<std::string>()));
  const bool exact_rules = pc.variant == "base" && pc.layout != "fast";
  const double tol = exact_rules ? golden["tolerance"]["logits_nmse_base"].get<double>()
                                          : golden["tolerance"]["logits_nmse_quantized"].get<double>();
  const double nmse = vlmd::testing::Nmse(logits, ref);
  EXPECT_LE(nmse, tol) << "prompt logits NMSE";
  RecordProperty("logits_nmse", std::to_string(nmse));

  // Greedy, teacher-forced with the golden ids: base must match every step (where the fixture
  // gives greedy_base_gap_threshold: every step before the first whose golden gap is below it,
  // llama.cpp's own run-to-run spread), quantized every step whose golden gap is >= the threshold.
  const auto ids = v["greedy_ids"].get<std::vector<int32_t>>();
  const auto gaps = v["greedy_gaps"].get<std::vector<double>>();
  const double gap_threshold = golden["tolerance"]["greedy_quantized_gap_threshold"].get<double>();
  const double base_gap = golden["tolerance"].value("greedy_base_gap_threshold", 0.0);
  int32_t slot = cache->n_filled();
  // The position counter after the prompt (M-RoPE: an image advances it by max(gw, gh)).
  int32_t pos = c->value("n_prompt_positions", slot);
  bool base_in_step = exact_rules;
  for (size_t step = 0; step < ids.size(); ++step) {
    const int32_t argmax = static_cast<int32_t>(
        std::max_element(logits.begin(), logits.end()) - logits.begin());
    base_in_step = base_in_step && gaps[step] >= base_gap;
    if (base_in_step || (!exact_rules && gaps[step] >= gap_threshold)) {
      EXPECT_EQ(argmax, ids[step]) << "greedy step " << step << " (golden gap " << gaps[step] << ")";
    }
    const int32_t tok = ids[step], seq = 0, row = 0;
    ForwardBatch b{1, &tok, nullptr, &slot, &seq, &row, 1};
    b.rope_pos = &pos;  // one position: broadcast to every M-RoPE section
    KvCache* caches[] = {cache.get()};
    Status s = (*model)->Forward(b, caches, &ctx_, logits.data());
    ASSERT_TRUE(s.ok()) << s.ToString();
    ++slot;
    ++pos;
  }
}

// The golden cases, listed here rather than read from golden.json: test registration must not
// read files (a missing or broken fixture is then a failing case naming its path, not an abort of
// the binary at start-up). GoldenCasesAreAllListed checks this list against the files.
struct FixtureCases {
  const char* fixture;
  std::vector<const char*> cases;
};
const std::vector<FixtureCases>& ListedCases() {
  static const std::vector<FixtureCases> kCases = {
      {"tiny-llava", {"img-32x32", "img-64x48", "text"}},
      {"tiny-llava16", {"img-32x32", "img-64x48", "two-images", "text"}},
      {"tiny-internvl", {"img-32x32", "img-96x64", "two-images", "text"}},
      {"tiny-gemma3", {"img-96x64", "img-64x64", "two-images", "text"}},
      {"tiny-smolvlm", {"img-128x96", "img-128x128", "img-50x100", "text"}},
      {"tiny-qwen2vl", {"img-168x112", "img-140x140", "img-50x40", "two-images", "text"}},
      {"tiny-qwen25vl", {"img-168x112", "img-140x140", "img-100x70", "two-images", "text"}},
      {"tiny-qwen3vl", {"img-168x112", "img-140x140", "img-50x40", "two-images", "text"}},
  };
  return kCases;
}

std::vector<ParityCase> AllCases() {
  std::vector<ParityCase> out;
  for (const FixtureCases& fc : ListedCases()) {
    for (const char* name : fc.cases) {
      // The fixtures added on 2026-12-01 (Qwen VL, LLaVA-1.6, InternVL) have two variants
      // (base, q4_k); tiny-llava and tiny-smolvlm four.
      const std::string fixture = fc.fixture;
      const bool two_variants = fixture != "tiny-llava" && fixture != "tiny-smolvlm";
      for (const char* variant : {"base", "q8_0", "q4_0", "q4_k"}) {
        if (two_variants && std::string(variant) != "base" && std::string(variant) != "q4_k") continue;
        // packed: the integer variants (their Q8_0 / Q4_0 matrices) in exact precision; fast:
        // every variant (float matrices to int8 blocks, Q4_K packed, and on AMX the prompt on
        // bf16 tiles).
        std::vector<const char*> layouts = {"gguf", "fast"};
        if (std::string(variant) == "q8_0" || std::string(variant) == "q4_0") layouts.push_back("packed");
        for (const char* layout : layouts) out.push_back({fc.fixture, name, variant, layout});
      }
    }
  }
  return out;
}

TEST(LlamaParityCasesTest, GoldenCasesAreAllListed) {
  for (const FixtureCases& fc : ListedCases()) {
    std::string error;
    const json golden = LoadGolden(fc.fixture, &error);
    ASSERT_TRUE(error.empty()) << error;
    std::vector<std::string> in_file, listed(fc.cases.begin(), fc.cases.end());
    for (const json& c : golden.at("cases")) in_file.push_back(c.at("name").get<std::string>());
    std::sort(in_file.begin(), in_file.end());
    std::sort(listed.begin(), listed.end());
    EXPECT_EQ(in_file, listed) << fc.fixture << ": golden.json's cases differ from ListedCases()";
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LlamaParityTest, ::testing::ValuesIn(AllCases()), CaseName);

}  // namespace
}  // namespace vlmd::engine::models
