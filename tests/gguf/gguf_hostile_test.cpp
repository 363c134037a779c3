// Hostile and corrupt GGUF inputs: each must produce its specific Status (code + message), never a
// crash or an out-of-bounds read (the asan build runs these too).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/gguf/gguf_reader.h"
#include "engine/gguf/gguf_writer.h"
#include "gguf/raw_gguf.h"

namespace vlmd::engine::gguf {
namespace {

using testing::RawGguf;

constexpr uint32_t kF32 = 0;
constexpr uint32_t kQ8_0 = 8;
constexpr uint32_t kF64 = 28;
constexpr uint32_t kString = 8;
constexpr uint32_t kArray = 9;
constexpr uint32_t kU32 = 4;
constexpr uint32_t kU64 = 10;

Status Parse(const std::vector<uint8_t>& bytes, const OpenOptions& opts = {}) {
  auto r = GgufFile::FromBytes(bytes, opts);
  return r.ok() ? Status::Ok() : r.status();
}

// Asserts the code and that the message contains `substr`.
#define EXPECT_GGUF_ERROR(input, want_code, substr)                                \
  do {                                                                             \
    const Status s_ = Parse(input);                                                \
    EXPECT_EQ(s_.code(), (want_code)) << s_.ToString();                            \
    EXPECT_NE(s_.message().find(substr), std::string::npos) << s_.ToString();      \
  } while (0)

// One F32 tensor "t" after one string KV; the data section holds `data_bytes` bytes.
std::vector<uint8_t> OneTensor(std::vector<uint64_t> ne, uint32_t type, uint64_t offset,
                               size_t data_bytes) {
  RawGguf g;
  g.Header(3, 1, 1).Str("general.architecture").U32(kString).Str("llama");
  g.TensorInfo("t", std::move(ne), type, offset).PadTo(32).Zeros(data_bytes);
  return g.bytes();
}

TEST(GgufHostile, ValidBaselineParses) {
  // The corrupt variants below differ from this in one field; it must itself be accepted.
  auto f = GgufFile::FromBytes(OneTensor({32, 2}, kF32, 0, 256));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ((*f)->tensors().size(), 1u);
  EXPECT_EQ((*f)->tensors()[0].nbytes, 256u);
  EXPECT_EQ((*f)->data_offset() % 32, 0u);
}

TEST(GgufHostile, TruncatedAtEveryOffsetFails) {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetU32("llama.block_count", 2);
  w.SetF32("llama.rope.freq_base", 10000.0f);
  w.SetBool("flag", true);
  const std::vector<std::string> toks = {"a", "bc", "", "def"};
  w.SetStringArray("tokenizer.ggml.tokens", toks);
  const std::vector<int32_t> ints = {1, -2, 3};
  w.SetI32Array("ints", ints);
  std::vector<uint8_t> a(4 * 16, 1), b(34 * 2, 2);
  const int64_t ne_a[] = {16}, ne_b[] = {32, 2};
  ASSERT_TRUE(w.AddTensor("a", DType::kF32, ne_a, a).ok());
  // q8_0 32x2 = 68 bytes: padded to 96, so the file ends in padding. Add a last tensor whose size
  // is a multiple of 32 so that the full file ends exactly at tensor data.
  ASSERT_TRUE(w.AddTensor("b", DType::kQ8_0, ne_b, b).ok());
  std::vector<uint8_t> c(32, 3);
  const int64_t ne_c[] = {8};
  ASSERT_TRUE(w.AddTensor("c", DType::kF32, ne_c, c).ok());
  const std::vector<uint8_t> full = w.WriteBytes();
  ASSERT_TRUE(Parse(full).ok());
  for (size_t n = 0; n < full.size(); ++n) {
    const std::vector<uint8_t> prefix(full.begin(), full.begin() + n);
    const Status s = Parse(prefix);
    ASSERT_EQ(s.code(), StatusCode::kDataLoss) << "prefix of " << n << " bytes: " << s.ToString();
  }
}

TEST(GgufHostile, BadMagic) {
  RawGguf g;
  g.Bytes("GGUX").U32(3).U64(0).U64(0);
  EXPECT_GGUF_ERROR(g.bytes(), StatusCode::kDataLoss, "bad magic");
}

TEST(GgufHostile, Versions) {
  EXPECT_GGUF_ERROR(RawGguf().Header(1, 0, 0).bytes(), StatusCode::kUnimplemented,
                    "GGUF v1 not supported");
  EXPECT_GGUF_ERROR(RawGguf().Header(4, 0, 0).bytes(), StatusCode::kUnimplemented,
                    "unsupported GGUF version 4");
  EXPECT_GGUF_ERROR(RawGguf().Header(0x03000000, 0, 0).bytes(), StatusCode::kUnimplemented,
                    "big-endian");
  EXPECT_TRUE(Parse(RawGguf().Header(2, 0, 0).bytes()).ok());
  EXPECT_TRUE(Parse(RawGguf().Header(3, 0, 0).bytes()).ok());
}

TEST(GgufHostile, HugeCounts) {
  EXPECT_GGUF_ERROR(RawGguf().Header(3, 0, uint64_t{1} << 40).bytes(), StatusCode::kDataLoss,
                    "n_kv 1099511627776 exceeds the limit");
  EXPECT_GGUF_ERROR(RawGguf().Header(3, UINT64_MAX, 0).bytes(), StatusCode::kDataLoss,
                    "n_tensors 18446744073709551615 exceeds the limit");
  // Within the limits but more than the bytes left could hold.
  EXPECT_GGUF_ERROR(RawGguf().Header(3, 0, 1000).Zeros(100).bytes(), StatusCode::kDataLoss,
                    "cannot fit");
  EXPECT_GGUF_ERROR(RawGguf().Header(3, 1000, 0).Zeros(100).bytes(), StatusCode::kDataLoss,
                    "cannot fit");
  OpenOptions tight;
  tight.max_kv = 1;
  RawGguf two;
  two.Header(3, 0, 2).Str("a").U32(kU32).U32(1).Str("b").U32(kU32).U32(2);
  EXPECT_EQ(Parse(two.bytes(), tight).code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Parse(two.bytes()).ok());
}

TEST(GgufHostile, StringLongerThanFile) {
  RawGguf key;
  key.Header(3, 0, 1).U64(1000).Bytes("abc").Zeros(20);
  EXPECT_GGUF_ERROR(key.bytes(), StatusCode::kDataLoss, "runs past end of file");
  RawGguf value;
  value.Header(3, 0, 1).Str("k").U32(kString).U64(UINT64_MAX).Bytes("abc");
  EXPECT_GGUF_ERROR(value.bytes(), StatusCode::kDataLoss, "value of key 'k' length");
  OpenOptions small;
  small.max_string_bytes = 2;
  RawGguf ok_len;
  ok_len.Header(3, 0, 1).Str("k").U32(kString).Str("abc");
  const Status s = Parse(ok_len.bytes(), small);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("exceeds the limit of 2 bytes"), std::string::npos) << s.ToString();
}

TEST(GgufHostile, ArrayCountOverflow) {
  // 2^61 + 1 u64 elements: count * 8 wraps to 8, which the remaining bytes would satisfy.
  RawGguf g;
  g.Header(3, 0, 1).Str("arr").U32(kArray).U32(kU64).U64((uint64_t{1} << 61) + 1).Zeros(64);
  EXPECT_GGUF_ERROR(g.bytes(), StatusCode::kDataLoss, "key 'arr': array of 2305843009213693953");
  RawGguf s;
  s.Header(3, 0, 1).Str("strs").U32(kArray).U32(kString).U64(uint64_t{1} << 62).Zeros(64);
  EXPECT_GGUF_ERROR(s.bytes(), StatusCode::kDataLoss, "strings cannot fit");
  // A string element whose length runs past the end.
  RawGguf e;
  e.Header(3, 0, 1).Str("strs").U32(kArray).U32(kString).U64(2).Str("ok").U64(999).Zeros(8);
  EXPECT_GGUF_ERROR(e.bytes(), StatusCode::kDataLoss, "element 1 of key 'strs'");
}

TEST(GgufHostile, UnknownValueTypes) {
  RawGguf g;
  g.Header(3, 0, 1).Str("weird").U32(13).U32(0);
  EXPECT_GGUF_ERROR(g.bytes(), StatusCode::kDataLoss, "key 'weird' has unknown value type 13");
  RawGguf a;
  a.Header(3, 0, 1).Str("weird").U32(kArray).U32(0xFFFFFFFF).U64(0);
  EXPECT_GGUF_ERROR(a.bytes(), StatusCode::kDataLoss, "array of unknown value type 4294967295");
  RawGguf n;
  n.Header(3, 0, 1).Str("nest").U32(kArray).U32(kArray).U64(1).U32(kU32).U64(1).U32(7);
  EXPECT_GGUF_ERROR(n.bytes(), StatusCode::kUnimplemented, "key 'nest' is a nested array");
}

TEST(GgufHostile, DuplicateKeyAndTensor) {
  RawGguf k;
  k.Header(3, 0, 2).Str("a").U32(kU32).U32(1).Str("a").U32(kU32).U32(2);
  EXPECT_GGUF_ERROR(k.bytes(), StatusCode::kDataLoss, "duplicate metadata key 'a'");
  RawGguf t;
  t.Header(3, 2, 0).TensorInfo("w", {32}, kF32, 0).TensorInfo("w", {32}, kF32, 128);
  t.PadTo(32).Zeros(256);
  EXPECT_GGUF_ERROR(t.bytes(), StatusCode::kDataLoss, "duplicate tensor name 'w'");
}

TEST(GgufHostile, BadAlignment) {
  for (uint32_t a : {0u, 3u, 48u}) {
    RawGguf g;
    g.Header(3, 0, 1).Str("general.alignment").U32(kU32).U32(a);
    EXPECT_GGUF_ERROR(g.bytes(), StatusCode::kDataLoss,
                      "general.alignment " + std::to_string(a) + " is not a non-zero power of two");
  }
  RawGguf wrong_type;
  wrong_type.Header(3, 0, 1).Str("general.alignment").U32(kU64).U64(32);
  EXPECT_GGUF_ERROR(wrong_type.bytes(), StatusCode::kDataLoss, "has type u64, expected u32");
}

TEST(GgufHostile, TensorShapeAndType) {
  EXPECT_GGUF_ERROR(OneTensor({}, kF32, 0, 64), StatusCode::kDataLoss,
                    "tensor 't': n_dims 0 is outside [1, 4]");
  EXPECT_GGUF_ERROR(OneTensor({1, 1, 1, 1, 1}, kF32, 0, 64), StatusCode::kDataLoss,
                    "tensor 't': n_dims 5 is outside [1, 4]");
  EXPECT_GGUF_ERROR(OneTensor({32}, 4, 0, 128), StatusCode::kUnimplemented,
                    "tensor 't' has unknown type 4");
  EXPECT_GGUF_ERROR(OneTensor({32}, 1000, 0, 128), StatusCode::kUnimplemented,
                    "tensor 't' has unknown type 1000");
  EXPECT_GGUF_ERROR(OneTensor({31}, kQ8_0, 0, 64), StatusCode::kDataLoss,
                    "row length ne[0] = 31 is not a multiple of the q8_0 block size 32");
  EXPECT_GGUF_ERROR(OneTensor({uint64_t{1} << 32, uint64_t{1} << 32}, kF32, 0, 64),
                    StatusCode::kDataLoss, "overflows int64");
  EXPECT_GGUF_ERROR(OneTensor({uint64_t{1} << 63}, kF32, 0, 64), StatusCode::kDataLoss,
                    "ne[0] = 9223372036854775808 is negative");
  // 2^62 f64 elements fit int64, but 2^65 bytes do not fit uint64.
  EXPECT_GGUF_ERROR(OneTensor({uint64_t{1} << 31, uint64_t{1} << 31}, kF64, 0, 64),
                    StatusCode::kDataLoss, "byte size overflows");
}

TEST(GgufHostile, TensorPlacement) {
  EXPECT_GGUF_ERROR(OneTensor({8}, kF32, 4, 64), StatusCode::kDataLoss,
                    "tensor 't': offset 4 is not a multiple of the alignment 32");
  const std::vector<uint8_t> past = OneTensor({64}, kF32, 0, 128);
  EXPECT_GGUF_ERROR(past, StatusCode::kDataLoss,
                    "tensor 't': data [offset 0, 256 bytes] extends past end of file (size " +
                        std::to_string(past.size()));
  EXPECT_GGUF_ERROR(OneTensor({8}, kF32, uint64_t{1} << 63, 64), StatusCode::kDataLoss,
                    "extends past end of file");
  // Offset just inside, size wrapping past UINT64_MAX if added naively.
  EXPECT_GGUF_ERROR(OneTensor({uint64_t{1} << 61}, kF32, 32, 64), StatusCode::kDataLoss,
                    "extends past end of file");
  // Tensors present but the file ends before the (padded) data section.
  RawGguf g;
  g.Header(3, 1, 0).TensorInfo("e", {0}, kF32, 0);
  EXPECT_GGUF_ERROR(g.bytes(), StatusCode::kDataLoss, "starts past end of file");
  // Two tensors sharing bytes (a sealed model wiped one's pages once the other was packed: it
  // then read zeros); back to back they are fine.
  auto two = [](uint64_t second_offset) {
    RawGguf t;
    t.Header(3, 2, 0).TensorInfo("a", {16}, kF32, 0).TensorInfo("b", {8}, kF32, second_offset);
    t.PadTo(32).Zeros(128);
    return t.bytes();
  };
  EXPECT_GGUF_ERROR(two(32), StatusCode::kDataLoss,
                    "tensors 'a' [offset 0, 64 bytes] and 'b' [offset 32] overlap");
  EXPECT_GGUF_ERROR(two(0), StatusCode::kDataLoss, "overlap");
  EXPECT_TRUE(Parse(two(64)).ok());
}

TEST(GgufHostile, EdgeCasesThatAreValid) {
  // An empty tensor (ne 0, allowed by ggml) at the very end of the file.
  auto empty = GgufFile::FromBytes(OneTensor({0}, kF32, 0, 0));
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_EQ((*empty)->tensors()[0].nbytes, 0u);
  EXPECT_EQ((*empty)->tensors()[0].n_elements(), 0);
  // Metadata-only file that ends right after its last KV, without data-section padding.
  RawGguf v;
  v.Header(3, 0, 1).Str("general.architecture").U32(kString).Str("gpt2");
  auto vocab = GgufFile::FromBytes(v.bytes());
  ASSERT_TRUE(vocab.ok()) << vocab.status().ToString();
  EXPECT_EQ(*(*vocab)->GetString("general.architecture"), "gpt2");
}

TEST(GgufHostile, OpenErrors) {
  auto missing = GgufFile::Open("/nonexistent/dir/model.gguf");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/dir/model.gguf"), std::string::npos);
  auto dir = GgufFile::Open("/tmp");
  EXPECT_EQ(dir.status().code(), StatusCode::kInvalidArgument);
  auto dev = GgufFile::Open("/dev/null");  // a character device, not a regular file
  EXPECT_EQ(dev.status().code(), StatusCode::kInvalidArgument);
  const std::string path = ::testing::TempDir() + "vlmd_empty_" + std::to_string(getpid()) + ".gguf";
  std::fclose(std::fopen(path.c_str(), "wb"));
  auto empty = GgufFile::Open(path);
  std::remove(path.c_str());
  EXPECT_EQ(empty.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(empty.status().message().find("reading magic"), std::string::npos)
      << empty.status().ToString();
}

}  // namespace
}  // namespace vlmd::engine::gguf
