// GgufWriter: encodes metadata eagerly (so replacing a key is a swap of bytes) and tensor infos
// at write time, when the aligned offsets are known.
#include "engine/gguf/gguf_writer.h"

#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/check.h"
#include "core/temp_file.h"

namespace vlmd::engine::gguf {

static_assert(std::endian::native == std::endian::little, "GGUF is written little-endian");

namespace {

constexpr std::string_view kAlignmentKey = "general.alignment";

// resize + memcpy rather than insert: GCC 12 reports a bogus -Wstringop-overflow for the latter.
void AppendBytes(std::vector<uint8_t>& out, const void* p, size_t n) {
  if (n == 0) return;
  const size_t at = out.size();
  out.resize(at + n);
  std::memcpy(out.data() + at, p, n);
}

template <typename T>
void Append(std::vector<uint8_t>& out, T v) {
  AppendBytes(out, &v, sizeof(T));
}

void AppendString(std::vector<uint8_t>& out, std::string_view s) {
  Append<uint64_t>(out, s.size());
  AppendBytes(out, s.data(), s.size());
}

template <typename T>
std::vector<uint8_t> EncodeScalar(ValueType type, T v) {
  std::vector<uint8_t> out;
  Append<uint32_t>(out, static_cast<uint32_t>(type));
  Append<T>(out, v);
  return out;
}

std::vector<uint8_t> ArrayHeader(ValueType elem, uint64_t count) {
  std::vector<uint8_t> out;
  Append<uint32_t>(out, static_cast<uint32_t>(ValueType::kArray));
  Append<uint32_t>(out, static_cast<uint32_t>(elem));
  Append<uint64_t>(out, count);
  return out;
}

bool IsPowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

// Streams bytes to a FILE*, remembering the first error.
class FileSink {
 public:
  explicit FileSink(std::FILE* f) : f_(f) {}
  bool Write(const uint8_t* p, size_t n) {
    if (ok_ && n > 0 && std::fwrite(p, 1, n, f_) != n) {
      ok_ = false;
      err_ = errno;
    }
    return ok_;
  }
  bool Zeros(uint64_t n) {
    static const uint8_t kZeros[4096] = {};
    while (ok_ && n > 0) {
      const size_t k = n < sizeof(kZeros) ? static_cast<size_t>(n) : sizeof(kZeros);
      Write(kZeros, k);
      n -= k;
    }
    return ok_;
  }
  bool ok() const { return ok_; }
  int err() const { return err_; }
  void Fail(int err) {
    if (ok_) {
      ok_ = false;
      err_ = err;
    }
  }

 private:
  std::FILE* f_;
  bool ok_ = true;
  int err_ = 0;
};

}  // namespace

void GgufWriter::Put(std::string_view key, std::vector<uint8_t> encoded) {
  auto it = kv_index_.find(std::string(key));
  if (it != kv_index_.end()) {
    kvs_[it->second].encoded = std::move(encoded);
    return;
  }
  kv_index_.emplace(std::string(key), kvs_.size());
  kvs_.push_back(Kv{std::string(key), std::move(encoded)});
}

void GgufWriter::SetU8(std::string_view k, uint8_t v) {
  VLMD_CHECK(k != kAlignmentKey);
  Put(k, EncodeScalar(ValueType::kUint8, v));
}
void GgufWriter::SetI8(std::string_view k, int8_t v) {
  VLMD_CHECK(k != kAlignmentKey);
  Put(k, EncodeScalar(ValueType::kInt8, v));
}
void GgufWriter::SetU16(std::string_view k, uint16_t v) {
  VLMD_CHECK(k != kAlignmentKey);
  Put(k, EncodeScalar(ValueType::kUint16, v));
}
void GgufWriter::SetI16(std::string_view k, int16_t v) {
  VLMD_CHECK(k != kAlignmentKey);
  Put(k, EncodeScalar(ValueType::kInt16, v));
}
void GgufWriter::SetU32(std::string_view k, uint32_t v) {
  if (k == kAlignmentKey) {
    VLMD_CHECK_MSG(IsPowerOfTwo(v), "general.alignment must be a non-zero power of two");
    alignment_ = v;
  }
  Put(k, EncodeScalar(ValueType::kUint32, v));
}
void GgufWriter::SetI32(std::string_view k, int32_t v) {
  VLMD_CHECK(k != kAlignmentKey);
  Put(k, EncodeScalar(ValueType::kInt32, v));
}
void GgufWriter::SetU64(std::string_view k, uint64_t v) {
  VLMD_CHECK(k != kAlignmentKey);
  Put(k, EncodeScalar(ValueType::kUint64, v));
}
void GgufWriter::SetI64(std::string_view k, int64_t v) {
  VLMD_CHECK(k != kAlignmentKey);
  Put(k, EncodeScalar(ValueType::kInt64, v));
}
void GgufWriter::SetF32(std::string_view k, float v) {
  VLMD_CHECK(k != kAlignmentKey);
  Put(k, EncodeScalar(ValueType::kFloat32, v));
}
void GgufWriter::SetF64(std::string_view k, double v) {
  VLMD_CHECK(k != kAlignmentKey);
  Put(k, EncodeScalar(ValueType::kFloat64, v));
}
void GgufWriter::SetBool(std::string_view k, bool v) {
  VLMD_CHECK(k != kAlignmentKey);
  Put(k, EncodeScalar<uint8_t>(ValueType::kBool, v ? 1 : 0));
}

void GgufWriter::SetString(std::string_view k, std::string_view v) {
  VLMD_CHECK(k != kAlignmentKey);
  std::vector<uint8_t> out;
  Append<uint32_t>(out, static_cast<uint32_t>(ValueType::kString));
  AppendString(out, v);
  Put(k, std::move(out));
}

void GgufWriter::SetStringArray(std::string_view k, std::span<const std::string> v) {
  std::vector<std::string_view> views(v.begin(), v.end());
  SetStringArray(k, std::span<const std::string_view>(views));
}

void GgufWriter::SetStringArray(std::string_view k, std::span<const std::string_view> v) {
  VLMD_CHECK(k != kAlignmentKey);
  std::vector<uint8_t> out = ArrayHeader(ValueType::kString, v.size());
  for (std::string_view s : v) AppendString(out, s);
  Put(k, std::move(out));
}

void GgufWriter::SetI32Array(std::string_view k, std::span<const int32_t> v) {
  VLMD_CHECK(k != kAlignmentKey);
  std::vector<uint8_t> out = ArrayHeader(ValueType::kInt32, v.size());
  for (int32_t x : v) Append<int32_t>(out, x);
  Put(k, std::move(out));
}

void GgufWriter::SetF32Array(std::string_view k, std::span<const float> v) {
  VLMD_CHECK(k != kAlignmentKey);
  std::vector<uint8_t> out = ArrayHeader(ValueType::kFloat32, v.size());
  for (float x : v) Append<float>(out, x);
  Put(k, std::move(out));
}

void GgufWriter::SetValue(std::string_view k, const MetadataValue& v) {
  switch (v.type) {
    case ValueType::kUint8: return SetU8(k, static_cast<uint8_t>(v.u));
    case ValueType::kInt8: return SetI8(k, static_cast<int8_t>(v.i));
    case ValueType::kUint16: return SetU16(k, static_cast<uint16_t>(v.u));
    case ValueType::kInt16: return SetI16(k, static_cast<int16_t>(v.i));
    case ValueType::kUint32: return SetU32(k, static_cast<uint32_t>(v.u));
    case ValueType::kInt32: return SetI32(k, static_cast<int32_t>(v.i));
    case ValueType::kUint64: return SetU64(k, v.u);
    case ValueType::kInt64: return SetI64(k, v.i);
    case ValueType::kFloat32: return SetF32(k, static_cast<float>(v.f));
    case ValueType::kFloat64: return SetF64(k, v.f);
    case ValueType::kBool: return SetBool(k, v.u != 0);
    case ValueType::kString: return SetString(k, v.str);
    case ValueType::kArray: {
      VLMD_CHECK(k != kAlignmentKey);
      // array_bytes is the exact on-disk encoding of the elements (strings included).
      std::vector<uint8_t> out = ArrayHeader(v.array_type, v.array_count);
      AppendBytes(out, v.array_bytes.data(), v.array_bytes.size());
      return Put(k, std::move(out));
    }
  }
  VLMD_CHECK_MSG(false, "unknown ValueType");
}

Status GgufWriter::SetAlignment(uint32_t alignment) {
  if (!IsPowerOfTwo(alignment)) {
    return InvalidArgumentError("alignment " + std::to_string(alignment) +
                                " is not a non-zero power of two");
  }
  SetU32(kAlignmentKey, alignment);
  return Status::Ok();
}

Status GgufWriter::ValidateTensor(std::string_view name, DType type, std::span<const int64_t> ne,
                                  uint64_t data_size, uint64_t* nbytes) const {
  const std::string who = "tensor '" + std::string(name) + "'";
  if (name.empty()) return InvalidArgumentError("tensor name is empty");
  if (name.size() > kMaxTensorName) {
    return InvalidArgumentError(who + ": name longer than " + std::to_string(kMaxTensorName) +
                                " bytes");
  }
  if (tensor_index_.count(std::string(name)) != 0) {
    return InvalidArgumentError("duplicate " + who);
  }
  if (ne.empty() || ne.size() > 4) {
    return InvalidArgumentError(who + ": " + std::to_string(ne.size()) + " dims, expected 1..4");
  }
  const DTypeTraits& traits = GetDTypeTraits(type);
  int64_t n = 1;
  for (size_t d = 0; d < ne.size(); ++d) {
    if (ne[d] < 0) {
      return InvalidArgumentError(who + ": ne[" + std::to_string(d) + "] is negative");
    }
    if (__builtin_mul_overflow(n, ne[d], &n)) {
      return InvalidArgumentError(who + ": element count overflows int64");
    }
  }
  if (ne[0] % traits.block_size != 0) {
    return InvalidArgumentError(who + ": ne[0] = " + std::to_string(ne[0]) +
                                " is not a multiple of the " + std::string(traits.name) +
                                " block size " + std::to_string(traits.block_size));
  }
  const uint64_t blocks = static_cast<uint64_t>(n / traits.block_size);
  if (__builtin_mul_overflow(blocks, static_cast<uint64_t>(traits.block_bytes), nbytes)) {
    return InvalidArgumentError(who + ": byte size overflows uint64");
  }
  if (*nbytes != data_size) {
    return InvalidArgumentError(who + ": " + std::to_string(data_size) + " bytes of data, but " +
                                std::string(traits.name) + " with this shape needs " +
                                std::to_string(*nbytes));
  }
  return Status::Ok();
}

Status GgufWriter::AddTensor(std::string_view name, DType type, std::span<const int64_t> ne,
                             std::span<const uint8_t> data) {
  VLMD_RETURN_IF_ERROR(AddTensorView(name, type, ne, data));
  Tensor& t = tensors_.back();
  t.owned.assign(data.begin(), data.end());
  t.view = {};
  return Status::Ok();
}

Status GgufWriter::AddTensorView(std::string_view name, DType type, std::span<const int64_t> ne,
                                 std::span<const uint8_t> data) {
  uint64_t nbytes = 0;
  VLMD_RETURN_IF_ERROR(ValidateTensor(name, type, ne, data.size(), &nbytes));
  Tensor t{std::string(name), type, static_cast<uint32_t>(ne.size()), {1, 1, 1, 1}, nbytes,
           {}, data};
  for (size_t d = 0; d < ne.size(); ++d) t.ne[d] = ne[d];
  tensor_index_.emplace(t.name, tensors_.size());
  tensors_.push_back(std::move(t));
  return Status::Ok();
}

std::vector<uint8_t> GgufWriter::Header() const {
  std::vector<uint8_t> out;
  AppendBytes(out, "GGUF", 4);
  Append<uint32_t>(out, 3);
  Append<uint64_t>(out, tensors_.size());
  Append<uint64_t>(out, kvs_.size());
  for (const Kv& kv : kvs_) {
    AppendString(out, kv.key);
    AppendBytes(out, kv.encoded.data(), kv.encoded.size());
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    AppendString(out, t.name);
    Append<uint32_t>(out, t.n_dims);
    for (uint32_t d = 0; d < t.n_dims; ++d) Append<uint64_t>(out, static_cast<uint64_t>(t.ne[d]));
    Append<uint32_t>(out, static_cast<uint32_t>(t.type));
    Append<uint64_t>(out, offset);
    offset += Padded(t.nbytes);
  }
  out.resize(Padded(out.size()), 0);
  return out;
}

uint64_t GgufWriter::FileSize() const {
  uint64_t size = Header().size();
  for (const Tensor& t : tensors_) size += Padded(t.nbytes);
  return size;
}

std::vector<uint8_t> GgufWriter::WriteBytes() const {
  std::vector<uint8_t> out = Header();
  for (const Tensor& t : tensors_) {
    const std::span<const uint8_t> b = t.bytes();
    AppendBytes(out, b.data(), b.size());
    out.resize(Padded(out.size()), 0);  // the data section starts aligned, so this pads t
  }
  return out;
}

Status GgufWriter::WriteFile(const std::string& path) const {
  VLMD_ASSIGN_OR_RETURN(const TempFile temp, CreateTempBeside(path));
  const std::string& tmp = temp.name;
  std::FILE* f = ::fdopen(temp.fd, "wb");
  if (f == nullptr) {
    const int err = errno;
    ::close(temp.fd);
    std::remove(tmp.c_str());
    return Status(StatusCode::kUnavailable, "cannot write '" + tmp + "': " + std::strerror(err));
  }
  FileSink sink(f);
  const std::vector<uint8_t> header = Header();
  sink.Write(header.data(), header.size());
  for (const Tensor& t : tensors_) {
    const std::span<const uint8_t> b = t.bytes();
    sink.Write(b.data(), b.size());
    sink.Zeros(Padded(t.nbytes) - t.nbytes);
  }
  if (sink.ok() && std::fflush(f) != 0) sink.Fail(errno);
  if (sink.ok() && ::fsync(fileno(f)) != 0) sink.Fail(errno);
  if (std::fclose(f) != 0) sink.Fail(errno);
  if (sink.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) sink.Fail(errno);
  if (!sink.ok()) {
    std::remove(tmp.c_str());
    return Status(StatusCode::kUnavailable,
                  "cannot write '" + path + "': " + std::strerror(sink.err()));
  }
  return Status::Ok();
}

}  // namespace vlmd::engine::gguf
