// Seed corpus of the GGUF reader fuzzer (tests/fuzz/corpus/gguf): small files from GgufWriter plus
// truncated copies. Normally checks the committed files (valid_* parse, trunc_* fail with
// DATA_LOSS); regenerate them (from the project root) with
//   VLMD_WRITE_FUZZ_CORPUS=tests/fuzz/corpus/gguf build/bin/vlmd_gguf_tests
//   --gtest_filter='GgufFuzzCorpus.*'
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "engine/gguf/gguf_reader.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/gguf/imatrix.h"
#include "test_util.h"

namespace vlmd::engine::gguf {
namespace {

constexpr size_t kMaxSeedBytes = 4096;

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(seed + i * 37);
  return out;
}

std::map<std::string, std::vector<uint8_t>> BuildCorpus() {
  std::map<std::string, std::vector<uint8_t>> files;
  {  // A vocab-only file: string/f32/i32 arrays, no tensors.
    GgufWriter w;
    w.SetString("general.architecture", "llama");
    w.SetString("tokenizer.ggml.model", "gpt2");
    const std::vector<std::string> toks = {"<s>", "</s>", "a", "b", "ab", "\xc4\xa0the", "\n", ""};
    w.SetStringArray("tokenizer.ggml.tokens", toks);
    const std::vector<float> scores = {0, 0, -1, -2, -3, -4, -5, -6};
    w.SetF32Array("tokenizer.ggml.scores", scores);
    const std::vector<int32_t> types = {3, 3, 1, 1, 1, 1, 6, 1};
    w.SetI32Array("tokenizer.ggml.token_type", types);
    const std::vector<std::string> merges = {"a b"};
    w.SetStringArray("tokenizer.ggml.merges", merges);
    w.SetU32("tokenizer.ggml.bos_token_id", 0);
    files["valid_vocab.gguf"] = w.WriteBytes();
  }
  {  // Every scalar type plus one small f32 tensor.
    GgufWriter w;
    w.SetU8("u8", 1);
    w.SetI8("i8", -1);
    w.SetU16("u16", 2);
    w.SetI16("i16", -2);
    w.SetU32("u32", 3);
    w.SetI32("i32", -3);
    w.SetU64("u64", 4);
    w.SetI64("i64", -4);
    w.SetF32("f32", 0.5f);
    w.SetF64("f64", 0.25);
    w.SetBool("bool", true);
    w.SetString("str", "hello");
    const int64_t ne[] = {4, 2};
    (void)w.AddTensor("t.weight", DType::kF32, ne, Pattern(32, 1));
    files["valid_scalars.gguf"] = w.WriteBytes();
  }
  {  // Quantized tensors at alignment 64.
    GgufWriter w;
    (void)w.SetAlignment(64);
    w.SetString("general.architecture", "llama");
    w.SetU32("llama.block_count", 1);
    const int64_t q8[] = {32, 2}, q4k[] = {256}, q4[] = {64};
    (void)w.AddTensor("blk.0.attn_q.weight", DType::kQ8_0, q8, Pattern(68, 2));
    (void)w.AddTensor("blk.0.ffn_down.weight", DType::kQ4_K, q4k, Pattern(144, 3));
    (void)w.AddTensor("blk.0.ffn_up.weight", DType::kQ4_0, q4, Pattern(36, 4));
    files["valid_quant.gguf"] = w.WriteBytes();
  }
  {  // Alignment 1, f16/bf16/i32 tensors, an empty tensor, a 3-D and a 4-D shape.
    GgufWriter w;
    (void)w.SetAlignment(1);
    w.SetString("general.architecture", "clip");
    const int64_t a[] = {3}, b[] = {2, 1, 2}, c[] = {0}, d[] = {1, 1, 1, 2};
    (void)w.AddTensor("v.a", DType::kF16, a, Pattern(6, 5));
    (void)w.AddTensor("v.b", DType::kBF16, b, Pattern(8, 6));
    (void)w.AddTensor("v.c", DType::kF32, c, {});
    (void)w.AddTensor("v.d", DType::kI32, d, Pattern(8, 7));
    files["valid_align1.gguf"] = w.WriteBytes();
  }
  const std::vector<uint8_t>& s = files["valid_scalars.gguf"];
  files["trunc_header.gguf"] = std::vector<uint8_t>(s.begin(), s.begin() + 12);
  files["trunc_scalars_half.gguf"] = std::vector<uint8_t>(s.begin(), s.begin() + s.size() / 2);
  {  // An importance matrix (engine/gguf/imatrix.h), the fuzzer's second reader: a dense matrix
     // and one of two experts, in GGUF and in the legacy layout (not GGUF: DATA_LOSS here).
    ImportanceMatrix m;
    m.datasets = {"calib"};
    m.chunk_count = 2;
    m.chunk_size = 64;
    m.entries["blk.0.attn_q.weight"] = {4, {1, 4, 9, 16}, {2}};
    m.entries["blk.0.ffn_up_exps.weight"] = {2, {3, 6, 0, 0}, {3, 0}};
    files["valid_imatrix.gguf"] = *SerializeImatrix(m);
    std::vector<uint8_t> dat;
    auto i32 = [&](int32_t v) { dat.insert(dat.end(), reinterpret_cast<uint8_t*>(&v), reinterpret_cast<uint8_t*>(&v) + 4); };
    i32(1);
    i32(6);
    for (char c : std::string("blk.1x")) dat.push_back(static_cast<uint8_t>(c));
    i32(2);  // ncall
    i32(2);  // nval
    for (float v : {2.0f, 6.0f}) dat.insert(dat.end(), reinterpret_cast<uint8_t*>(&v), reinterpret_cast<uint8_t*>(&v) + 4);
    i32(2);  // chunks
    i32(5);
    for (char c : std::string("calib")) dat.push_back(static_cast<uint8_t>(c));
    files["notgguf_legacy_imatrix.dat"] = dat;
  }
  const std::vector<uint8_t>& q = files["valid_quant.gguf"];
  files["trunc_quant_data.gguf"] = std::vector<uint8_t>(q.begin(), q.end() - 100);
  return files;
}

TEST(GgufFuzzCorpus, SeedsParseAsNamed) {
  const std::map<std::string, std::vector<uint8_t>> corpus = BuildCorpus();
  const char* out_dir = std::getenv("VLMD_WRITE_FUZZ_CORPUS");
  for (const auto& [name, bytes] : corpus) {
    SCOPED_TRACE(name);
    EXPECT_LE(bytes.size(), kMaxSeedBytes);
    auto f = GgufFile::FromBytes(bytes);
    if (name.starts_with("valid_")) {
      EXPECT_TRUE(f.ok()) << f.status().ToString();
    } else {
      EXPECT_EQ(f.status().code(), StatusCode::kDataLoss) << f.status().ToString();
    }
    if (out_dir != nullptr) {
      std::ofstream(std::string(out_dir) + "/" + name, std::ios::binary)
          .write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    }
  }
}

TEST(GgufFuzzCorpus, CommittedSeedsMatchTheGenerator) {
  // The committed corpus is exactly what BuildCorpus makes (regenerate it when the writer's output
  // changes on purpose), so the fuzzer starts from files our writer really produces.
  const std::string dir = testing::SourcePath("tests/fuzz/corpus/gguf");
  const std::map<std::string, std::vector<uint8_t>> corpus = BuildCorpus();
  size_t seen = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    auto it = corpus.find(name);
    ASSERT_NE(it, corpus.end()) << "unexpected file " << name << " in " << dir;
    EXPECT_EQ(testing::ReadFileBytes(entry.path().string()), it->second) << name;
    ++seen;
  }
  EXPECT_EQ(seen, corpus.size()) << "corpus in " << dir << " is incomplete; regenerate it";
}

}  // namespace
}  // namespace vlmd::engine::gguf
