// Reads every GGUF under tests/fixtures and checks it against golden.json ("files": size, tensor
// count per type, which tensor has which type) and the documented hyperparameters (README.md).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "engine/gguf/gguf_reader.h"
#include "fixture_json.h"
#include "test_util.h"

namespace vlmd::engine::gguf {
namespace {

using vlmd::testing::FixturePath;

std::string Upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// "blk.*.attn_q.weight" -> regex matching blk.<digits>.attn_q.weight.
std::regex GlobToRegex(const std::string& glob) {
  std::string re;
  for (char c : glob) {
    if (c == '*') re += "[0-9]+";
    else if (std::isalnum(static_cast<unsigned char>(c)) || c == '_') re += c;
    else re += std::string("\\") + c;
  }
  return std::regex(re);
}

std::unique_ptr<GgufFile> OpenOrFail(const std::string& path) {
  auto r = GgufFile::Open(path);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : nullptr;
}

// Every tensor's bytes lie inside the file, at aligned offsets, without overlapping.
void ExpectTensorsInBounds(const GgufFile& f) {
  const uint8_t* base = f.tensors().empty() ? nullptr : f.tensors()[0].data - f.tensors()[0].offset;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const TensorInfo& t : f.tensors()) {
    EXPECT_EQ(t.data, base + t.offset) << t.name;
    EXPECT_EQ(t.offset % f.alignment(), 0u) << t.name;
    EXPECT_LE(f.data_offset() + t.offset + t.nbytes, f.file_size()) << t.name;
    EXPECT_EQ(t.nbytes, *RowBytes(t.type, t.ne[0]) * uint64_t(t.ne[1] * t.ne[2] * t.ne[3]));
    ranges.emplace_back(t.offset, t.offset + t.nbytes);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) EXPECT_LE(ranges[i - 1].second, ranges[i].first);
}

struct FixtureCase {
  std::string dir;
  uint32_t n_vocab;
  uint32_t n_head_kv;
};

class GgufFixtures : public ::testing::TestWithParam<FixtureCase> {};

TEST_P(GgufFixtures, MatchGoldenFiles) {
  const FixtureCase& fc = GetParam();
  std::string error;
  const nlohmann::json golden = vlmd::testing::ReadFixtureJson(fc.dir + "/golden.json", &error);
  ASSERT_TRUE(error.empty()) << error;
  const auto& files = golden.at("files");
  ASSERT_GE(files.size(), 5u);
  for (const auto& [name, spec] : files.items()) {
    SCOPED_TRACE(fc.dir + "/" + name);
    auto f = OpenOrFail(FixturePath(fc.dir + "/" + name));
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->file_size(), spec.at("bytes").get<uint64_t>());
    EXPECT_EQ(f->alignment(), 32u);
    ExpectTensorsInBounds(*f);

    std::map<std::string, size_t> counts;
    for (const TensorInfo& t : f->tensors()) {
      const std::string type = Upper(DTypeName(t.type));
      ++counts[type];
      ASSERT_TRUE(spec.at("tensor_types").contains(type)) << t.name << " has type " << type;
      bool matched = false;
      for (const auto& glob : spec.at("tensor_types").at(type)) {
        matched = matched || std::regex_match(std::string(t.name), GlobToRegex(glob));
      }
      EXPECT_TRUE(matched) << t.name << " is not listed under " << type;
    }
    std::map<std::string, size_t> want;
    for (const auto& [type, n] : spec.at("tensor_count").items()) want[type] = n.get<size_t>();
    EXPECT_EQ(counts, want);

    const bool mmproj = name == "mmproj.gguf";
    EXPECT_EQ(*f->GetString("general.architecture"), mmproj ? "clip" : "llama");
    if (!mmproj) {
      EXPECT_EQ(*f->GetU32("llama.embedding_length"), 64u);
      EXPECT_EQ(*f->GetU32("llama.block_count"), 2u);
      EXPECT_EQ(*f->GetU32("llama.attention.head_count"), 4u);
      EXPECT_EQ(*f->GetU32("llama.attention.head_count_kv"), fc.n_head_kv);
      EXPECT_EQ(*f->GetU32("llama.feed_forward_length"), 256u);
      EXPECT_NEAR(*f->GetF32("llama.attention.layer_norm_rms_epsilon"), 1e-5f, 1e-12f);
      const auto tokens = f->GetStringArray("tokenizer.ggml.tokens");
      ASSERT_TRUE(tokens.ok()) << tokens.status().ToString();
      EXPECT_EQ(tokens->size(), fc.n_vocab);
      const TensorInfo* embd = f->FindTensor("token_embd.weight");
      ASSERT_NE(embd, nullptr);
      EXPECT_EQ(embd->n_dims, 2);
      EXPECT_EQ(embd->ne[0], 64);
      EXPECT_EQ(embd->ne[1], fc.n_vocab);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, GgufFixtures,
                         ::testing::Values(FixtureCase{"tiny-llava", 50257, 2},
                                           FixtureCase{"tiny-smolvlm", 49280, 1}),
                         [](const auto& info) {
                           std::string n = info.param.dir;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

TEST(GgufFixtures, TokenizerVocabs) {
  for (const char* name : {"gpt-2", "starcoder", "llama-spm", "phi-3"}) {
    SCOPED_TRACE(name);
    auto f = OpenOrFail(FixturePath(std::string("tokenizer/ggml-vocab-") + name + ".gguf"));
    ASSERT_NE(f, nullptr);
    EXPECT_TRUE(f->GetString("general.architecture").ok());
    const auto model = f->GetString("tokenizer.ggml.model");
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    const bool spm = std::string_view(name) == "llama-spm" || std::string_view(name) == "phi-3";
    EXPECT_EQ(*model, spm ? "llama" : "gpt2");
    const auto tokens = f->GetStringArray("tokenizer.ggml.tokens");
    ASSERT_TRUE(tokens.ok()) << tokens.status().ToString();
    EXPECT_GT(tokens->size(), 1000u);
    // Every per-token array has one entry per token.
    for (const char* key : {"tokenizer.ggml.scores", "tokenizer.ggml.token_type"}) {
      if (const MetadataValue* v = f->Find(key)) {
        EXPECT_EQ(v->array_count, tokens->size()) << key;
      }
    }
    ExpectTensorsInBounds(*f);
  }
}

// The ReleasePages tests: tiny-llava's text file and its largest tensor (the one spanning the
// most pages), at least three pages long.
class ReleasedPages : public ::testing::Test {
 protected:
  void SetUp() override {
    f = OpenOrFail(FixturePath("tiny-llava/text.gguf"));
    ASSERT_NE(f, nullptr);
    for (const TensorInfo& t : f->tensors()) {
      if (biggest == nullptr || t.nbytes > biggest->nbytes) biggest = &t;
    }
    ASSERT_NE(biggest, nullptr);
    ASSERT_GT(biggest->nbytes, 3 * page) << "the fixture's largest tensor spans too few pages";
  }
  std::unique_ptr<GgufFile> f;
  const TensorInfo* biggest = nullptr;
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
};

// ReleasePages drops whole pages inside a tensor and nothing else: the bytes read back unchanged
// (faulted in again from the file), a range outside the mapping or an in-memory image releases
// nothing.
TEST_F(ReleasedPages, ReadBackUnchanged) {
  const std::vector<uint8_t> before(biggest->data, biggest->data + biggest->nbytes);
  const uint64_t released = f->ReleasePages(biggest->data, biggest->nbytes);
  EXPECT_GT(released, 0u);
  EXPECT_LE(released, biggest->nbytes);
  EXPECT_EQ(std::vector<uint8_t>(biggest->data, biggest->data + biggest->nbytes), before);
  // Outside the mapping, zero-sized, or a copy in memory: nothing.
  const std::vector<uint8_t> elsewhere(1 << 16);
  EXPECT_EQ(f->ReleasePages(elsewhere.data(), elsewhere.size()), 0u);
  EXPECT_EQ(f->ReleasePages(biggest->data, 0), 0u);
  EXPECT_EQ(f->ReleasePages(biggest->data, f->file_size() * 2), 0u);
  std::ifstream in(FixturePath("tiny-llava/text.gguf"), std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
  auto mem = GgufFile::FromBytes(bytes);
  ASSERT_TRUE(mem.ok());
  const TensorInfo* t = (*mem)->FindTensor(biggest->name);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ((*mem)->ReleasePages(t->data, t->nbytes), 0u);
}

// Each page counts once in released_bytes (the memory cap subtracts it from a decrypted file's
// size): a range released again counts nothing, an overlapping one only its new pages.
TEST_F(ReleasedPages, CountOnce) {
  ASSERT_GT(biggest->nbytes, 4 * page) << "the fixture's largest tensor spans too few pages";
  const uint64_t half = biggest->nbytes / 2;
  const uint64_t first_half = f->ReleasePages(biggest->data, half);
  EXPECT_GT(first_half, 0u);
  EXPECT_EQ(f->released_bytes(), first_half);
  EXPECT_EQ(f->ReleasePages(biggest->data, half), 0u);
  EXPECT_EQ(f->released_bytes(), first_half);
  const uint64_t whole = f->ReleasePages(biggest->data, biggest->nbytes);
  EXPECT_GT(whole, 0u);
  EXPECT_EQ(f->released_bytes(), first_half + whole);
  EXPECT_LE(f->released_bytes(), biggest->nbytes);
  EXPECT_EQ(f->ReleasePages(biggest->data + page, 2 * page), 0u);
  EXPECT_EQ(f->released_bytes(), first_half + whole);
}

}  // namespace
}  // namespace vlmd::engine::gguf
