// Importance-matrix files: the GGUF form round trips with the layout llama.cpp's tools write and
// read (tensor names, shapes, types, keys); the legacy binary form is read as llama.cpp reads it;
// the importance is sum / count per expert (1 for an expert never routed to); hostile files
// (truncated at every byte, misshapen, non-finite, unpaired) are errors, never a crash.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

#include "engine/gguf/gguf_reader.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/gguf/imatrix.h"
#include "engine/gguf/quantize_model.h"
#include "test_util.h"
#include "core/sha256.h"

namespace vlmd::engine::gguf {
namespace {

ImportanceMatrix Sample() {
  ImportanceMatrix m;
  m.datasets = {"calib/images.jsonl"};
  m.chunk_count = 12;
  m.chunk_size = 512;
  m.entries["blk.0.attn_q.weight"] = {4, {1, 4, 9, 16}, {2}};
  // Three experts of 2 columns; the last never received a token.
  m.entries["blk.0.ffn_up_exps.weight"] = {2, {3, 6, 10, 20, 0, 0}, {3, 5, 0}};
  return m;
}

TEST(Imatrix, GgufRoundTripsInLlamaCppsLayout) {
  const ImportanceMatrix m = Sample();
  auto bytes = SerializeImatrix(m);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  // The layout llama-imatrix writes and llama-quantize reads.
  auto f = GgufFile::FromBytes(*bytes);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(*(*f)->GetString("general.type"), "imatrix");
  EXPECT_EQ(*(*f)->GetU32("imatrix.chunk_count"), 12u);
  EXPECT_EQ(*(*f)->GetU32("imatrix.chunk_size"), 512u);
  EXPECT_EQ((*f)->GetStringArray("imatrix.datasets")->at(0), "calib/images.jsonl");
  const TensorInfo* sums = (*f)->FindTensor("blk.0.ffn_up_exps.weight.in_sum2");
  const TensorInfo* counts = (*f)->FindTensor("blk.0.ffn_up_exps.weight.counts");
  ASSERT_NE(sums, nullptr);
  ASSERT_NE(counts, nullptr);
  EXPECT_EQ(sums->type, DType::kF32);
  EXPECT_EQ(sums->n_dims, 2);
  EXPECT_EQ(sums->ne[0], 2);  // columns
  EXPECT_EQ(sums->ne[1], 3);  // experts
  EXPECT_EQ(counts->ne[0], 1);
  EXPECT_EQ(counts->ne[1], 3);
  EXPECT_EQ((*f)->tensors().size(), 4u);

  auto back = ParseImatrix(*bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->datasets, m.datasets);
  EXPECT_EQ(back->chunk_count, 12u);
  EXPECT_EQ(back->chunk_size, 512u);
  ASSERT_EQ(back->entries.size(), 2u);
  for (const auto& [name, e] : m.entries) {
    const ImatrixEntry& b = back->entries.at(name);
    EXPECT_EQ(b.n_cols, e.n_cols) << name;
    EXPECT_EQ(b.sum_sq, e.sum_sq) << name;
    EXPECT_EQ(b.counts, e.counts) << name;
  }
  EXPECT_EQ(back->Importance("blk.0.attn_q.weight"), (std::vector<float>{0.5f, 2, 4.5f, 8}));
  EXPECT_EQ(back->Importance("blk.0.ffn_up_exps.weight"), (std::vector<float>{1, 2, 2, 4, 1, 1}));
  EXPECT_TRUE(back->Importance("output.weight").empty());
}

TEST(Imatrix, FileWriteAndRead) {
  const std::string path = ::testing::TempDir() + "imatrix_test.gguf";
  ASSERT_TRUE(WriteImatrixFile(Sample(), path).ok());
  auto m = ReadImatrixFile(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->entries.size(), 2u);
  std::remove(path.c_str());
  auto missing = ReadImatrixFile(path);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(path), std::string::npos);
}

void PutI32(std::vector<uint8_t>* b, int32_t v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  b->insert(b->end(), p, p + 4);
}
void PutStr(std::vector<uint8_t>* b, const std::string& s) {
  PutI32(b, static_cast<int32_t>(s.size()));
  b->insert(b->end(), s.begin(), s.end());
}
void PutF32s(std::vector<uint8_t>* b, const std::vector<float>& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  b->insert(b->end(), p, p + v.size() * 4);
}

// llama-imatrix's legacy layout: values are mean x^2 times ncall.
std::vector<uint8_t> Legacy(bool trailer) {
  std::vector<uint8_t> b;
  PutI32(&b, 2);
  PutStr(&b, "blk.0.attn_k.weight");
  PutI32(&b, 4);  // ncall
  PutI32(&b, 3);  // nval
  PutF32s(&b, {4, 8, 12});
  PutStr(&b, "blk.0.ffn_down.weight");
  PutI32(&b, 2);
  PutI32(&b, 2);
  PutF32s(&b, {1, 3});
  if (trailer) {
    PutI32(&b, 7);  // chunks
    PutStr(&b, "wiki.train.raw");
  }
  return b;
}

TEST(Imatrix, LegacyFilesReadAsLlamaCppReadsThem) {
  for (bool trailer : {false, true}) {
    auto m = ParseImatrix(Legacy(trailer));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    ASSERT_EQ(m->entries.size(), 2u);
    EXPECT_EQ(m->Importance("blk.0.attn_k.weight"), (std::vector<float>{1, 2, 3}));
    EXPECT_EQ(m->Importance("blk.0.ffn_down.weight"), (std::vector<float>{0.5f, 1.5f}));
    EXPECT_EQ(m->chunk_count, trailer ? 7u : 0u);
    EXPECT_EQ(m->datasets.size(), trailer ? 1u : 0u);
    // Written back as GGUF, it reads the same.
    auto again = ParseImatrix(*SerializeImatrix(*m));
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->Importance("blk.0.attn_k.weight"), (std::vector<float>{1, 2, 3}));
  }
}

TEST(Imatrix, TruncatedFilesAreErrorsAtEveryByte) {
  for (const std::vector<uint8_t>& whole : {Legacy(true), *SerializeImatrix(Sample())}) {
    for (size_t n = 0; n < whole.size(); ++n) {
      const std::vector<uint8_t> cut(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(n));
      auto m = ParseImatrix(cut);
      // Only a cut that leaves every entry whole may read: a legacy file ending after its last
      // entry or its chunk count (an older writer's file), a GGUF file without the padding
      // after its last tensor.
      if (m.ok()) {
        const ImportanceMatrix full = *ParseImatrix(whole);
        ASSERT_EQ(m->entries.size(), full.entries.size()) << n;
        for (const auto& [name, e] : full.entries) EXPECT_EQ(m->entries.at(name).sum_sq, e.sum_sq) << n;
      }
    }
  }
}

ImportanceMatrix WithEntry(ImatrixEntry e) {
  ImportanceMatrix m;
  m.entries["blk.0.attn_v.weight"] = std::move(e);
  return m;
}

// Builds a GGUF whose tensors are given raw (the writer refuses what these tests need).
std::vector<uint8_t> GgufWith(const std::vector<std::tuple<std::string, DType, std::vector<int64_t>>>& tensors) {
  GgufWriter w;
  w.SetString("general.type", "imatrix");
  for (const auto& [name, type, ne] : tensors) {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    const size_t bytes = type == DType::kF16 ? static_cast<size_t>(n) * 2 : static_cast<size_t>(n) * 4;
    std::vector<uint8_t> data(bytes, 0);
    EXPECT_TRUE(w.AddTensor(name, type, ne, data).ok()) << name;
  }
  return w.WriteBytes();
}

TEST(Imatrix, HostileFilesAreErrorsNamingTheProblem) {
  auto expect_error = [](const std::vector<uint8_t>& bytes, const std::string& says) {
    auto m = ParseImatrix(bytes);
    ASSERT_FALSE(m.ok()) << says;
    EXPECT_EQ(m.status().code(), StatusCode::kDataLoss) << m.status().ToString();
    EXPECT_NE(m.status().message().find(says), std::string::npos) << m.status().ToString();
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Values a quantizer cannot use: the writer checks sizes only, so these reach the reader.
  expect_error(*SerializeImatrix(WithEntry({2, {1, -1}, {1}})), "negative or non-finite");
  expect_error(*SerializeImatrix(WithEntry({2, {1, nan}, {1}})), "negative or non-finite");
  expect_error(*SerializeImatrix(WithEntry({2, {1, 1}, {nan}})), "negative or non-finite");
  expect_error(*SerializeImatrix(WithEntry({2, {1, 1}, {1e-30f}})), "not a whole number");
  // Unpaired, misnamed, wrongly typed or misshapen tensors.
  expect_error(GgufWith({{"a.weight.in_sum2", DType::kF32, {4, 1}}}), "has no a.weight.counts");
  expect_error(GgufWith({{"a.weight.counts", DType::kF32, {1, 1}}}), "has no a.weight.in_sum2");
  expect_error(GgufWith({{"a.weight", DType::kF32, {4, 1}}}), "neither sums");
  expect_error(GgufWith({{"a.weight.in_sum2", DType::kF16, {4, 1}}, {"a.weight.counts", DType::kF32, {1, 1}}}),
               "must be F32");
  expect_error(GgufWith({{"a.weight.in_sum2", DType::kF32, {5, 1}}, {"a.weight.counts", DType::kF32, {1, 2}}}),
               "are not [columns, n] and [1, n]");
  expect_error(GgufWith({{"a.weight.in_sum2", DType::kF32, {1, 1}}, {"a.weight.counts", DType::kF32, {1, 2}}}),
               "are not [columns, n] and [1, n]");
  expect_error(GgufWith({{"a.weight.in_sum2", DType::kF32, {4, 1}}, {"a.weight.counts", DType::kF32, {2, 1}}}),
               "are not [columns, n] and [1, n]");
  // Legacy headers that would have the reader allocate without bound or read past the end.
  std::vector<uint8_t> b;
  PutI32(&b, 0);
  expect_error(b, "0 entries");
  b.clear();
  PutI32(&b, 2000000000);
  expect_error(b, "entries");
  b.clear();
  PutI32(&b, 1);
  PutI32(&b, 1 << 30);
  expect_error(b, "name length");
  b.clear();
  PutI32(&b, 1);
  PutStr(&b, "w");
  PutI32(&b, 1);
  PutI32(&b, 1 << 30);  // a billion values in a few bytes
  expect_error(b, "truncated in the values");
  b.clear();
  PutI32(&b, 1);
  PutStr(&b, "w");
  PutI32(&b, -3);
  PutI32(&b, 1);
  PutF32s(&b, {1});
  expect_error(b, "-3 calls");
  // ncall 0: llama.cpp keeps the values as they are (no division).
  b.clear();
  PutI32(&b, 1);
  PutStr(&b, "w");
  PutI32(&b, 0);
  PutI32(&b, 2);
  PutF32s(&b, {3, 5});
  EXPECT_EQ(ParseImatrix(b)->Importance("w"), (std::vector<float>{3, 5}));
  std::vector<uint8_t> twice = Legacy(false);
  std::vector<uint8_t> dup;
  PutI32(&dup, 2);
  for (int i = 0; i < 2; ++i) {
    PutStr(&dup, "w");
    PutI32(&dup, 1);
    PutI32(&dup, 1);
    PutF32s(&dup, {1});
  }
  expect_error(dup, "appears twice");
  std::vector<uint8_t> extra = Legacy(true);
  extra.push_back(0);
  expect_error(extra, "bytes after the dataset name");
  // The writer refuses what it would write wrong.
  EXPECT_EQ(SerializeImatrix(WithEntry({3, {1, 2}, {1}})).status().code(), StatusCode::kInvalidArgument);
  ImportanceMatrix long_name;
  long_name.entries[std::string(60, 'x')] = {1, {1}, {1}};
  EXPECT_EQ(SerializeImatrix(long_name).status().code(), StatusCode::kInvalidArgument);
}

// What llama-imatrix wrote for the tiny-smolvlm fixture (GGUF and legacy .dat, from the same text;
// tests/data/quant/llama_imatrix/README.md): both load with the same importances, and quantizing
// the fixture with it gives, tensor for tensor, the bytes `llama-quantize --pure --imatrix` wrote
// (their SHA-256 recorded there).
TEST(ImatrixInteropTest, LlamaImatrixWeighsAsLlamaQuantize) {
  const std::string dir = vlmd::testing::SourcePath("tests/data/quant/llama_imatrix/");
  auto from_gguf = ReadImatrixFile(dir + "imatrix.gguf");
  auto from_dat = ReadImatrixFile(dir + "imatrix.dat");
  ASSERT_TRUE(from_gguf.ok()) << from_gguf.status().ToString();
  ASSERT_TRUE(from_dat.ok()) << from_dat.status().ToString();
  ASSERT_EQ(from_gguf->entries.size(), 14u);
  ASSERT_EQ(from_dat->entries.size(), 14u);
  for (const auto& [name, e] : from_gguf->entries) {
    const std::vector<float> a = from_gguf->Importance(name), b = from_dat->Importance(name);
    ASSERT_EQ(a.size(), b.size()) << name;
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5f * a[i]) << name << " " << i;
  }
  const std::string out = std::filesystem::temp_directory_path().string() + "/vlmd-llama-imatrix-" +
                          std::to_string(::getpid()) + ".gguf";
  auto report = QuantizeModel(vlmd::testing::FixturePath("tiny-smolvlm/text.gguf"), out,
                              {.type = DType::kQ4_0, .imatrix = &*from_gguf}, nullptr);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  int weighted = 0;
  for (const auto& t : report->tensors) weighted += t.weighted;
  EXPECT_EQ(weighted, 14);
  auto file = GgufFile::Open(out);
  ASSERT_TRUE(file.ok());
  std::ifstream list(dir + "q4_0_sha256.txt");
  std::string name, type, sha;
  int checked = 0;
  while (list >> name >> type >> sha) {
    const TensorInfo* t = (*file)->FindTensor(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(DTypeName(t->type), type) << name;
    EXPECT_EQ(DigestHex(Sha256Of({t->data, t->nbytes})), sha) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 20);
  std::filesystem::remove(out);
}

}  // namespace
}  // namespace vlmd::engine::gguf
