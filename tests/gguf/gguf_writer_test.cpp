// GgufWriter round trips through GgufFile: every value type, several tensor types, alignment,
// key replacement, borrowed tensors, file output, and the writer's own validation; plus the typed
// getters' conversions and errors.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/gguf/gguf_reader.h"
#include "engine/gguf/gguf_writer.h"
#include "gguf/raw_gguf.h"

namespace vlmd::engine::gguf {
namespace {

std::unique_ptr<GgufFile> Read(const std::vector<uint8_t>& bytes) {
  auto r = GgufFile::FromBytes(bytes);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : nullptr;
}

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

TEST(GgufWriter, EveryScalarTypeRoundTrips) {
  GgufWriter w;
  w.SetU8("u8", 250);
  w.SetI8("i8", -100);
  w.SetU16("u16", 65000);
  w.SetI16("i16", -32000);
  w.SetU32("u32", 4000000000u);
  w.SetI32("i32", -2000000000);
  w.SetU64("u64", UINT64_MAX);
  w.SetI64("i64", INT64_MIN);
  w.SetF32("f32", 1e-5f);
  w.SetF64("f64", 3.141592653589793);
  w.SetBool("yes", true);
  w.SetBool("no", false);
  w.SetString("s", "h\xc3\xa9llo");
  w.SetString("empty", "");
  auto f = Read(w.WriteBytes());
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->version(), 3u);
  ASSERT_EQ(f->metadata().size(), 14u);
  // Insertion order is kept.
  EXPECT_EQ(f->metadata()[0].key, "u8");
  EXPECT_EQ(f->metadata()[13].key, "empty");

  EXPECT_EQ(f->Find("u8")->type, ValueType::kUint8);
  EXPECT_EQ(f->Find("u8")->u, 250u);
  EXPECT_EQ(f->Find("i8")->type, ValueType::kInt8);
  EXPECT_EQ(f->Find("i8")->i, -100);
  EXPECT_EQ(f->Find("u16")->u, 65000u);
  EXPECT_EQ(f->Find("i16")->i, -32000);
  EXPECT_EQ(*f->GetU32("u32"), 4000000000u);
  EXPECT_EQ(*f->GetI64("i32"), -2000000000);
  EXPECT_EQ(f->Find("u64")->u, UINT64_MAX);
  EXPECT_EQ(*f->GetI64("i64"), INT64_MIN);
  EXPECT_EQ(f->Find("f32")->type, ValueType::kFloat32);
  EXPECT_EQ(*f->GetF32("f32"), 1e-5f);  // exact: stored as f32
  EXPECT_EQ(f->Find("f64")->f, 3.141592653589793);
  EXPECT_TRUE(*f->GetBool("yes"));
  EXPECT_FALSE(*f->GetBool("no"));
  EXPECT_EQ(*f->GetString("s"), "h\xc3\xa9llo");
  EXPECT_EQ(*f->GetString("empty"), "");
}

TEST(GgufWriter, ArraysRoundTrip) {
  GgufWriter w;
  const std::vector<std::string> strs = {"<s>", "", "\xe2\x96\x81the", std::string(1, '\0')};
  const std::vector<int32_t> ints = {0, -1, INT32_MAX, INT32_MIN};
  const std::vector<float> floats = {0.5f, -0.0f, 1e30f, std::numeric_limits<float>::infinity()};
  w.SetStringArray("strs", strs);
  w.SetI32Array("ints", ints);
  w.SetF32Array("floats", floats);
  w.SetI32Array("none", {});
  auto f = Read(w.WriteBytes());
  ASSERT_NE(f, nullptr);
  auto s = f->GetStringArray("strs");
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->size(), strs.size());
  for (size_t i = 0; i < strs.size(); ++i) EXPECT_EQ((*s)[i], strs[i]);
  EXPECT_EQ(*f->GetI32Array("ints"), ints);
  EXPECT_EQ(*f->GetF32Array("floats"), floats);
  EXPECT_TRUE(f->GetI32Array("none")->empty());
  EXPECT_EQ(f->Find("strs")->array_count, 4u);
  EXPECT_EQ(ArrayElements(*f->Find("strs"), 2).size(), 2u);
}

TEST(GgufWriter, SetValueCopiesEveryTypeByteForByte) {
  // Arrays of every element type, built raw (the writer only has typed setters for a few).
  testing::RawGguf g;
  g.Header(3, 0, 13);
  for (uint32_t t = 0; t <= 12; ++t) {
    std::string key = "k";  // not "k" + to_string(t): GCC 12 warns falsely (-Wrestrict)
    key += std::to_string(t);
    g.Str(key);
    if (t == 9) {  // array of u16
      g.U32(9).U32(2).U64(3).U8(1).U8(0).U8(2).U8(0).U8(0xFF).U8(0xFF);
    } else if (t == 8) {
      g.U32(8).Str("str");
    } else {
      g.U32(9).U32(t).U64(2);  // array of 2 elements of type t
      const size_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
      for (size_t i = 0; i < 2 * sizes[t]; ++i) g.U8(static_cast<uint8_t>(0x11 * (i + 1)));
    }
  }
  const std::vector<uint8_t> raw = g.PadTo(32).bytes();
  auto src = Read(raw);
  ASSERT_NE(src, nullptr);
  GgufWriter w;
  for (const MetadataEntry& e : src->metadata()) w.SetValue(e.key, e.value);
  EXPECT_EQ(w.WriteBytes(), raw);
  // Element decoding of the u16 array.
  const auto elems = ArrayElements(*src->Find("k9"));
  ASSERT_EQ(elems.size(), 3u);
  EXPECT_EQ(elems[0].u, 1u);
  EXPECT_EQ(elems[2].u, 65535u);
  EXPECT_EQ(*src->GetI32Array("k9"), (std::vector<int32_t>{1, 2, 65535}));
}

TEST(GgufWriter, ReplacingKeyKeepsPosition) {
  GgufWriter w;
  w.SetU32("a", 1);
  w.SetString("b", "x");
  w.SetF32("a", 2.5f);  // replaced, type changes too
  auto f = Read(w.WriteBytes());
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(f->metadata().size(), 2u);
  EXPECT_EQ(f->metadata()[0].key, "a");
  EXPECT_EQ(*f->GetF32("a"), 2.5f);
}

struct TensorCase {
  const char* name;
  DType type;
  std::vector<int64_t> ne;
};

TEST(GgufWriter, TensorsRoundTripAtEveryAlignment) {
  const std::vector<TensorCase> cases = {
      {"f32", DType::kF32, {7, 3}},          {"f16", DType::kF16, {5}},
      {"bf16", DType::kBF16, {4, 2, 2}},     {"q8_0", DType::kQ8_0, {64, 3}},
      {"q4_0", DType::kQ4_0, {32, 1, 1, 2}}, {"q4_K", DType::kQ4_K, {256, 2}},
      {"q6_K", DType::kQ6_K, {256}},         {"i32", DType::kI32, {3}},
      {"empty", DType::kF32, {0, 4}},
  };
  for (uint32_t alignment : {1u, 32u, 64u, 4096u}) {
    SCOPED_TRACE("alignment " + std::to_string(alignment));
    GgufWriter w;
    ASSERT_TRUE(w.SetAlignment(alignment).ok());
    w.SetString("general.architecture", "test");
    std::vector<std::vector<uint8_t>> data;
    for (size_t i = 0; i < cases.size(); ++i) {
      const auto& c = cases[i];
      int64_t n = 1;
      for (int64_t d : c.ne) n *= d;
      data.push_back(RandomBytes(*RowBytes(c.type, n), static_cast<uint32_t>(i)));
      ASSERT_TRUE(w.AddTensor(c.name, c.type, c.ne, data.back()).ok()) << c.name;
    }
    const std::vector<uint8_t> bytes = w.WriteBytes();
    EXPECT_EQ(bytes.size(), w.FileSize());
    auto f = Read(bytes);
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->alignment(), alignment);
    EXPECT_EQ(*f->GetU32("general.alignment"), alignment);
    EXPECT_EQ(f->data_offset() % alignment, 0u);
    ASSERT_EQ(f->tensors().size(), cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
      const auto& c = cases[i];
      const TensorInfo* t = f->FindTensor(c.name);
      ASSERT_NE(t, nullptr) << c.name;
      EXPECT_EQ(t, &f->tensors()[i]);  // order kept
      EXPECT_EQ(t->type, c.type);
      EXPECT_EQ(t->n_dims, static_cast<int>(c.ne.size()));
      for (int d = 0; d < 4; ++d) {
        EXPECT_EQ(t->ne[d], d < static_cast<int>(c.ne.size()) ? c.ne[d] : 1) << c.name;
      }
      EXPECT_EQ(t->offset % alignment, 0u);
      ASSERT_EQ(t->nbytes, data[i].size());
      EXPECT_TRUE(std::equal(data[i].begin(), data[i].end(), t->data)) << c.name;
    }
  }
}

TEST(GgufWriter, ViewAndCopyProduceTheSameFile) {
  const std::vector<uint8_t> d = RandomBytes(34 * 4, 7);
  const int64_t ne[] = {32, 4};
  GgufWriter copy, view;
  ASSERT_TRUE(copy.AddTensor("w", DType::kQ8_0, ne, d).ok());
  ASSERT_TRUE(view.AddTensorView("w", DType::kQ8_0, ne, d).ok());
  EXPECT_EQ(copy.WriteBytes(), view.WriteBytes());
}

TEST(GgufWriter, WriteFileMatchesWriteBytes) {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  const std::vector<uint8_t> d = RandomBytes(4 * 10, 3);
  const int64_t ne[] = {10};
  ASSERT_TRUE(w.AddTensorView("t", DType::kF32, ne, d).ok());
  const std::string dir = ::testing::TempDir() + "vlmd_writer_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/x.gguf";
  // A file named as the temp file once was (an input, say): never touched.
  { std::ofstream(path + ".tmp") << "keep me"; }
  ASSERT_TRUE(w.WriteFile(path).ok());
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->file_size(), w.FileSize());
  EXPECT_TRUE(std::equal(d.begin(), d.end(), (*f)->tensors()[0].data));
  std::string kept;
  std::getline(std::ifstream(path + ".tmp"), kept);
  EXPECT_EQ(kept, "keep me");
  // Nothing else is left beside it: the temp file was renamed.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()), 2);
  std::filesystem::remove_all(dir);

  const Status bad = w.WriteFile("/nonexistent/dir/x.gguf");
  EXPECT_EQ(bad.code(), StatusCode::kUnavailable);
  EXPECT_NE(bad.message().find("/nonexistent/dir/x.gguf.tmp"), std::string::npos);
}

TEST(GgufWriter, RejectsInvalidTensors) {
  GgufWriter w;
  const std::vector<uint8_t> d(34, 0);
  const int64_t q8[] = {32}, odd[] = {31}, five[] = {1, 1, 1, 1, 1}, neg[] = {-32};
  const int64_t big[] = {int64_t{1} << 40, int64_t{1} << 40};
  ASSERT_TRUE(w.AddTensor("ok", DType::kQ8_0, q8, d).ok());
  auto expect = [&](Status s, std::string_view substr) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find(substr), std::string::npos) << s.ToString();
  };
  expect(w.AddTensor("ok", DType::kQ8_0, q8, d), "duplicate tensor 'ok'");
  expect(w.AddTensor("", DType::kQ8_0, q8, d), "name is empty");
  expect(w.AddTensor(std::string(64, 'x'), DType::kQ8_0, q8, d), "name longer than 63");
  expect(w.AddTensor("odd", DType::kQ8_0, odd, d), "not a multiple of the q8_0 block size 32");
  expect(w.AddTensor("five", DType::kF32, five, d), "5 dims, expected 1..4");
  expect(w.AddTensor("zero", DType::kF32, {}, d), "0 dims");
  expect(w.AddTensor("neg", DType::kF32, neg, d), "negative");
  expect(w.AddTensor("big", DType::kF32, big, d), "overflows int64");
  expect(w.AddTensor("size", DType::kF32, q8, d), "34 bytes of data, but f32 with this shape needs 128");
  EXPECT_EQ(w.SetAlignment(0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.SetAlignment(24).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.alignment(), 32u);
  // The failed adds left nothing behind.
  auto f = Read(w.WriteBytes());
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->tensors().size(), 1u);
}

TEST(GgufGetters, ConversionsAndErrors) {
  GgufWriter w;
  w.SetU64("big", uint64_t{1} << 40);
  w.SetI32("neg", -5);
  w.SetU8("small", 7);
  w.SetF64("huge", 1e300);
  w.SetF32("inf", std::numeric_limits<float>::infinity());
  w.SetF32("nan", std::numeric_limits<float>::quiet_NaN());
  w.SetString("s", "x");
  const std::vector<int32_t> ints = {1, 2};
  w.SetI32Array("ints", ints);
  w.SetU64("u64max", UINT64_MAX);
  auto f = Read(w.WriteBytes());
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(*f->GetU32("small"), 7u);
  EXPECT_EQ(*f->GetI64("big"), int64_t{1} << 40);
  EXPECT_EQ(*f->GetF32("small"), 7.0f);
  EXPECT_EQ(*f->GetF32("neg"), -5.0f);

  auto code = [](const auto& r) { return r.status().code(); };
  EXPECT_EQ(code(f->GetU32("big")), StatusCode::kOutOfRange);
  EXPECT_EQ(code(f->GetU32("neg")), StatusCode::kOutOfRange);
  EXPECT_EQ(code(f->GetI64("u64max")), StatusCode::kOutOfRange);
  EXPECT_EQ(code(f->GetF32("huge")), StatusCode::kOutOfRange);
  EXPECT_EQ(code(f->GetF32("inf")), StatusCode::kOutOfRange);  // no hyperparameter is infinite
  EXPECT_EQ(code(f->GetF32("nan")), StatusCode::kOutOfRange);
  EXPECT_EQ(code(f->GetU32("missing")), StatusCode::kNotFound);
  EXPECT_EQ(code(f->GetString("missing")), StatusCode::kNotFound);
  EXPECT_EQ(code(f->GetU32("s")), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(f->GetBool("small")), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(f->GetString("small")), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(f->GetStringArray("ints")), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(f->GetF32Array("ints")), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(f->GetI32Array("s")), StatusCode::kInvalidArgument);
  const auto mismatch = f->GetU32("s");
  EXPECT_NE(mismatch.status().message().find("key 's' has type string, expected u32"),
            std::string::npos)
      << mismatch.status().ToString();
  const auto arr = f->GetString("ints");
  EXPECT_NE(arr.status().message().find("has type array of i32"), std::string::npos);
}

}  // namespace
}  // namespace vlmd::engine::gguf
