// GGUF v2/v3 parser over a read-only mapping (or an owned, aligned copy for FromBytes).
// Every read goes through ByteCursor, which checks the bytes left before touching memory, and
// every count is bounded by the bytes left before anything is allocated for it.
#include "engine/gguf/gguf_reader.h"

#include "core/disjoint_ranges.h"
#include "core/secure_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <memory>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

namespace vlmd::engine::gguf {

static_assert(std::endian::native == std::endian::little,
              "the reader decodes little-endian GGUF in place; a big-endian host needs byte swaps");

namespace {

constexpr uint64_t kDefaultAlignment = 32;
constexpr uint64_t kBufferAlignment = 64;  // FromBytes copies: cache-line aligned like a mapping
constexpr int kMaxDims = 4;                // GGML_MAX_DIMS
// Smallest possible encodings, used to reject absurd counts before allocating: a KV pair is at
// least key length (8) + value type (4) + the smallest value (1 byte); a tensor info is at least
// name length (8) + n_dims (4) + one ne (8) + type (4) + offset (8).
constexpr uint64_t kMinKvBytes = 13;
constexpr uint64_t kMinTensorInfoBytes = 32;

// Size of a fixed-size value type; 0 for string/array (variable) and unknown ids.
uint64_t FixedSize(uint32_t type) {
  switch (static_cast<ValueType>(type)) {
    case ValueType::kUint8: case ValueType::kInt8: case ValueType::kBool: return 1;
    case ValueType::kUint16: case ValueType::kInt16: return 2;
    case ValueType::kUint32: case ValueType::kInt32: case ValueType::kFloat32: return 4;
    case ValueType::kUint64: case ValueType::kInt64: case ValueType::kFloat64: return 8;
    default: return 0;
  }
}

bool IsKnownType(uint32_t type) { return type <= static_cast<uint32_t>(ValueType::kFloat64); }

template <typename T>
T LoadLe(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Decodes a fixed-size scalar of `type` at `p` (caller guarantees FixedSize(type) bytes).
MetadataValue DecodeScalar(ValueType type, const uint8_t* p) {
  MetadataValue v;
  v.type = type;
  auto set_signed = [&v](int64_t x) { v.i = x; v.u = static_cast<uint64_t>(x); };
  auto set_unsigned = [&v](uint64_t x) { v.u = x; v.i = static_cast<int64_t>(x); };
  switch (type) {
    case ValueType::kUint8: set_unsigned(p[0]); break;
    case ValueType::kBool: set_unsigned(p[0] != 0 ? 1 : 0); break;
    case ValueType::kInt8: set_signed(static_cast<int8_t>(p[0])); break;
    case ValueType::kUint16: set_unsigned(LoadLe<uint16_t>(p)); break;
    case ValueType::kInt16: set_signed(LoadLe<int16_t>(p)); break;
    case ValueType::kUint32: set_unsigned(LoadLe<uint32_t>(p)); break;
    case ValueType::kInt32: set_signed(LoadLe<int32_t>(p)); break;
    case ValueType::kUint64: set_unsigned(LoadLe<uint64_t>(p)); break;
    case ValueType::kInt64: set_signed(LoadLe<int64_t>(p)); break;
    case ValueType::kFloat32: v.f = LoadLe<float>(p); break;
    case ValueType::kFloat64: v.f = LoadLe<double>(p); break;
    default: break;
  }
  return v;
}

// Bounds-checked little-endian reader. Failures name what was being read and where.
class ByteCursor {
 public:
  ByteCursor(const uint8_t* data, uint64_t size) : data_(data), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }

  Status Need(uint64_t n, std::string_view what) const {
    if (n > left()) {
      return DataLossError("unexpected end of file at offset " + std::to_string(pos_) +
                           " reading " + std::string(what) + " (need " + std::to_string(n) +
                           " bytes, " + std::to_string(left()) + " left)");
    }
    return Status::Ok();
  }

  template <typename T>
  Status Read(T* out, std::string_view what) {
    VLMD_RETURN_IF_ERROR(Need(sizeof(T), what));
    *out = LoadLe<T>(data_ + pos_);
    pos_ += sizeof(T);
    return Status::Ok();
  }

  // Returns a view of the next n bytes (checked) and advances past them.
  Status Take(uint64_t n, std::string_view what, const uint8_t** out) {
    VLMD_RETURN_IF_ERROR(Need(n, what));
    *out = data_ + pos_;
    pos_ += n;
    return Status::Ok();
  }

  // gguf_string: u64 length + bytes (no terminator).
  Status ReadString(uint64_t max_len, std::string_view what, std::string_view* out) {
    uint64_t len = 0;
    VLMD_RETURN_IF_ERROR(Read(&len, std::string(what) + " length"));
    if (len > max_len) {
      return DataLossError(std::string(what) + " length " + std::to_string(len) +
                           " exceeds the limit of " + std::to_string(max_len) + " bytes");
    }
    if (len > left()) {
      return DataLossError(std::string(what) + " length " + std::to_string(len) + " at offset " +
                           std::to_string(pos_ - 8) + " runs past end of file (" +
                           std::to_string(left()) + " bytes left)");
    }
    *out = std::string_view(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return Status::Ok();
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

std::string Quote(std::string_view s) {
  // Keys and names come from the file: bound what goes into a message and escape control bytes,
  // so that an error stays one printable line in logs and CLI output.
  constexpr size_t kMaxShown = 96;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "'";
  for (unsigned char c : s.substr(0, kMaxShown)) {
    if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > kMaxShown) out += "...";
  out += "'";
  return out;
}

}  // namespace

std::string_view ValueTypeName(ValueType t) {
  switch (t) {
    case ValueType::kUint8: return "u8";
    case ValueType::kInt8: return "i8";
    case ValueType::kUint16: return "u16";
    case ValueType::kInt16: return "i16";
    case ValueType::kUint32: return "u32";
    case ValueType::kInt32: return "i32";
    case ValueType::kFloat32: return "f32";
    case ValueType::kBool: return "bool";
    case ValueType::kString: return "string";
    case ValueType::kArray: return "array";
    case ValueType::kUint64: return "u64";
    case ValueType::kInt64: return "i64";
    case ValueType::kFloat64: return "f64";
  }
  return "unknown";
}

void VisitArrayElements(const MetadataValue& array, uint64_t max_elements,
                        const std::function<void(const MetadataValue&)>& visit) {
  if (array.type != ValueType::kArray) return;
  const uint64_t n = std::min(array.array_count, max_elements);
  const uint8_t* p = array.array_bytes.data();
  const uint8_t* end = p + array.array_bytes.size();
  if (array.array_type == ValueType::kString) {
    // The reader validated every length; re-check anyway so a hand-built value cannot overrun.
    for (uint64_t i = 0; i < n && end - p >= 8; ++i) {
      const uint64_t len = LoadLe<uint64_t>(p);
      p += 8;
      if (len > static_cast<uint64_t>(end - p)) break;
      MetadataValue v;
      v.type = ValueType::kString;
      v.str = std::string_view(reinterpret_cast<const char*>(p), len);
      p += len;
      visit(v);
    }
    return;
  }
  const uint64_t size = FixedSize(static_cast<uint32_t>(array.array_type));
  if (size == 0) return;
  for (uint64_t i = 0; i < n && static_cast<uint64_t>(end - p) >= size; ++i, p += size) {
    visit(DecodeScalar(array.array_type, p));
  }
}

std::vector<MetadataValue> ArrayElements(const MetadataValue& array, uint64_t max_elements) {
  std::vector<MetadataValue> out;
  if (array.type == ValueType::kArray) out.reserve(static_cast<size_t>(std::min(array.array_count, max_elements)));
  VisitArrayElements(array, max_elements, [&](const MetadataValue& v) { out.push_back(v); });
  return out;
}

struct GgufFile::Impl {
  // Exactly one of these owns the bytes.
  void* mapping = nullptr;    // mmap'ed file (munmap on destruction)
  uint8_t* owned = nullptr;   // aligned copy (free on destruction)
  SecureBuffer secure;        // decrypted sealed file (wiped on destruction)
  const uint8_t* base = nullptr;
  uint64_t size = 0;
  // The pages ReleasePages has given back of a mapped file, so that a range released twice or
  // overlapping an earlier one counts once (a SecureBuffer keeps its own).
  std::mutex released_mu;
  DisjointRanges mapped_released;
  std::atomic<uint64_t> released{0};  // the bytes given back, each page once

  uint32_t version = 0;
  uint64_t alignment = kDefaultAlignment;
  uint64_t data_offset = 0;
  std::vector<MetadataEntry> metadata;
  std::vector<TensorInfo> tensors;
  std::unordered_map<std::string_view, size_t> key_index;
  std::unordered_map<std::string_view, size_t> tensor_index;
  // looked_up[i]: FindTensor has returned tensor i (relaxed atomics: lookups may come from
  // several threads; only "ever" matters).
  std::unique_ptr<std::atomic<bool>[]> looked_up;

  ~Impl() {
    if (mapping != nullptr) munmap(mapping, size);
    std::free(owned);
  }

  Status Parse(const OpenOptions& opts);
  Status ParseValue(ByteCursor& cur, std::string_view key, uint32_t raw_type,
                    const OpenOptions& opts, MetadataValue* out);
  Status ParseTensorInfo(ByteCursor& cur, uint64_t index, const OpenOptions& opts);
  Status CheckTensorData(TensorInfo& t);
  Status CheckNoOverlap() const;
};

Status GgufFile::Impl::ParseValue(ByteCursor& cur, std::string_view key, uint32_t raw_type,
                                  const OpenOptions& opts, MetadataValue* out) {
  if (!IsKnownType(raw_type)) {
    return DataLossError("key " + Quote(key) + " has unknown value type " +
                         std::to_string(raw_type));
  }
  const auto type = static_cast<ValueType>(raw_type);
  if (type == ValueType::kString) {
    out->type = type;
    return cur.ReadString(opts.max_string_bytes, "value of key " + Quote(key), &out->str);
  }
  if (type != ValueType::kArray) {
    const uint8_t* p = nullptr;
    VLMD_RETURN_IF_ERROR(cur.Take(FixedSize(raw_type), "value of key " + Quote(key), &p));
    *out = DecodeScalar(type, p);
    return Status::Ok();
  }

  uint32_t raw_elem = 0;
  uint64_t count = 0;
  VLMD_RETURN_IF_ERROR(cur.Read(&raw_elem, "array element type of key " + Quote(key)));
  VLMD_RETURN_IF_ERROR(cur.Read(&count, "array count of key " + Quote(key)));
  if (!IsKnownType(raw_elem)) {
    return DataLossError("key " + Quote(key) + " is an array of unknown value type " +
                         std::to_string(raw_elem));
  }
  if (static_cast<ValueType>(raw_elem) == ValueType::kArray) {
    return UnimplementedError("key " + Quote(key) + " is a nested array (not supported)");
  }
  out->type = ValueType::kArray;
  out->array_type = static_cast<ValueType>(raw_elem);
  out->array_count = count;
  const uint64_t start = cur.pos();
  if (out->array_type == ValueType::kString) {
    // Each string needs at least its 8-byte length: bound the count before walking it.
    if (count > cur.left() / 8) {
      return DataLossError("key " + Quote(key) + ": array of " + std::to_string(count) +
                           " strings cannot fit in the " + std::to_string(cur.left()) +
                           " bytes left");
    }
    std::string_view s;
    for (uint64_t i = 0; i < count; ++i) {
      VLMD_RETURN_IF_ERROR(cur.ReadString(
          opts.max_string_bytes, "element " + std::to_string(i) + " of key " + Quote(key), &s));
    }
  } else {
    const uint64_t elem = FixedSize(raw_elem);
    if (count > cur.left() / elem) {  // count * elem would run past the end (or wrap)
      return DataLossError("key " + Quote(key) + ": array of " + std::to_string(count) + " " +
                           std::string(ValueTypeName(out->array_type)) + " values (" +
                           std::to_string(elem) + " bytes each) runs past end of file (" +
                           std::to_string(cur.left()) + " bytes left)");
    }
    const uint8_t* p = nullptr;
    VLMD_RETURN_IF_ERROR(cur.Take(count * elem, "array of key " + Quote(key), &p));
  }
  out->array_bytes = std::span<const uint8_t>(base + start, cur.pos() - start);
  return Status::Ok();
}

Status GgufFile::Impl::ParseTensorInfo(ByteCursor& cur, uint64_t index, const OpenOptions& opts) {
  TensorInfo t;
  VLMD_RETURN_IF_ERROR(
      cur.ReadString(opts.max_string_bytes, "name of tensor " + std::to_string(index), &t.name));
  const std::string who = "tensor " + Quote(t.name);
  if (!tensor_index.emplace(t.name, tensors.size()).second) {
    return DataLossError("duplicate tensor name " + Quote(t.name));
  }
  uint32_t n_dims = 0;
  VLMD_RETURN_IF_ERROR(cur.Read(&n_dims, "n_dims of " + who));
  if (n_dims < 1 || n_dims > kMaxDims) {
    return DataLossError(who + ": n_dims " + std::to_string(n_dims) + " is outside [1, 4]");
  }
  t.n_dims = static_cast<int>(n_dims);
  for (uint32_t d = 0; d < n_dims; ++d) {
    uint64_t ne = 0;
    VLMD_RETURN_IF_ERROR(cur.Read(&ne, "ne[" + std::to_string(d) + "] of " + who));
    if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return DataLossError(who + ": ne[" + std::to_string(d) + "] = " + std::to_string(ne) +
                           " is negative as int64");
    }
    t.ne[d] = static_cast<int64_t>(ne);  // 0 is allowed (ggml accepts empty tensors)
  }
  uint32_t raw_type = 0;
  VLMD_RETURN_IF_ERROR(cur.Read(&raw_type, "type of " + who));
  VLMD_RETURN_IF_ERROR(cur.Read(&t.offset, "offset of " + who));

  const std::optional<DTypeTraits> traits = FindDTypeTraits(raw_type);
  if (!traits) {
    return UnimplementedError(who + " has unknown type " + std::to_string(raw_type));
  }
  t.type = traits->type;
  if (t.ne[0] % traits->block_size != 0) {
    return DataLossError(who + ": row length ne[0] = " + std::to_string(t.ne[0]) +
                         " is not a multiple of the " + std::string(traits->name) +
                         " block size " + std::to_string(traits->block_size));
  }
  int64_t n_elements = 1;
  for (int d = 0; d < kMaxDims; ++d) {
    if (__builtin_mul_overflow(n_elements, t.ne[d], &n_elements)) {
      return DataLossError(who + ": element count " + std::to_string(t.ne[0]) + " x " +
                           std::to_string(t.ne[1]) + " x " + std::to_string(t.ne[2]) + " x " +
                           std::to_string(t.ne[3]) + " overflows int64");
    }
  }
  // n_elements is a multiple of block_size because ne[0] is.
  const uint64_t n_blocks = static_cast<uint64_t>(n_elements / traits->block_size);
  if (__builtin_mul_overflow(n_blocks, static_cast<uint64_t>(traits->block_bytes), &t.nbytes)) {
    return DataLossError(who + ": byte size overflows uint64");
  }
  tensors.push_back(t);
  return Status::Ok();
}

// No two tensors share bytes (llama.cpp's writer lays them out back to back, and its loader
// refuses anything else): the loader releases a tensor's pages once it is packed, which in a
// sealed model's memory wipes them, and a tensor that overlapped it then read zeros (wrong
// answers, no error).
Status GgufFile::Impl::CheckNoOverlap() const {
  std::vector<const TensorInfo*> by_offset;
  for (const TensorInfo& t : tensors) {
    if (t.nbytes > 0) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo& a = *by_offset[i - 1];
    const TensorInfo& b = *by_offset[i];
    if (b.offset - a.offset < a.nbytes) {  // both within the file: no overflow
      return DataLossError("tensors " + Quote(a.name) + " [offset " + std::to_string(a.offset) + ", " +
                           std::to_string(a.nbytes) + " bytes] and " + Quote(b.name) + " [offset " +
                           std::to_string(b.offset) + "] overlap");
    }
  }
  return Status::Ok();
}

Status GgufFile::Impl::CheckTensorData(TensorInfo& t) {
  const std::string who = "tensor " + Quote(t.name);
  if (t.offset % alignment != 0) {
    return DataLossError(who + ": offset " + std::to_string(t.offset) +
                         " is not a multiple of the alignment " + std::to_string(alignment));
  }
  // data_offset <= size is checked by the caller whenever tensors exist.
  const uint64_t data_bytes = size - data_offset;
  if (t.offset > data_bytes || t.nbytes > data_bytes - t.offset) {
    return DataLossError(who + ": data [offset " + std::to_string(t.offset) + ", " +
                         std::to_string(t.nbytes) + " bytes] extends past end of file (size " +
                         std::to_string(size) + ", data section at " +
                         std::to_string(data_offset) + ")");
  }
  t.data = base + data_offset + t.offset;
  return Status::Ok();
}

Status GgufFile::Impl::Parse(const OpenOptions& opts) {
  ByteCursor cur(base, size);
  const uint8_t* magic = nullptr;
  VLMD_RETURN_IF_ERROR(cur.Take(4, "magic", &magic));
  if (std::memcmp(magic, "GGUF", 4) != 0) {
    return DataLossError("bad magic: not a GGUF file");
  }
  VLMD_RETURN_IF_ERROR(cur.Read(&version, "version"));
  if ((version & 0xFFFFu) == 0 && version != 0) {
    // A little-endian read of a big-endian 2 or 3 has its low half zero.
    return UnimplementedError("big-endian GGUF files are not supported");
  }
  if (version == 1) return UnimplementedError("GGUF v1 not supported");
  if (version != 2 && version != 3) {
    return UnimplementedError("unsupported GGUF version " + std::to_string(version));
  }
  uint64_t n_tensors = 0;
  uint64_t n_kv = 0;
  VLMD_RETURN_IF_ERROR(cur.Read(&n_tensors, "n_tensors"));
  VLMD_RETURN_IF_ERROR(cur.Read(&n_kv, "n_kv"));
  if (n_kv > opts.max_kv) {
    return DataLossError("n_kv " + std::to_string(n_kv) + " exceeds the limit of " +
                         std::to_string(opts.max_kv));
  }
  if (n_tensors > opts.max_tensors) {
    return DataLossError("n_tensors " + std::to_string(n_tensors) + " exceeds the limit of " +
                         std::to_string(opts.max_tensors));
  }
  // Both factors are now bounded only by caller limits: compare by division to avoid wrap.
  if (n_kv > cur.left() / kMinKvBytes ||
      n_tensors > (cur.left() - n_kv * kMinKvBytes) / kMinTensorInfoBytes) {
    return DataLossError("header claims " + std::to_string(n_kv) + " metadata entries and " +
                         std::to_string(n_tensors) + " tensors, which cannot fit in the " +
                         std::to_string(cur.left()) + " bytes left");
  }

  metadata.reserve(n_kv);
  key_index.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    MetadataEntry e;
    VLMD_RETURN_IF_ERROR(cur.ReadString(opts.max_string_bytes,
                                        "key of metadata entry " + std::to_string(i), &e.key));
    if (!key_index.emplace(e.key, metadata.size()).second) {
      return DataLossError("duplicate metadata key " + Quote(e.key));
    }
    uint32_t raw_type = 0;
    VLMD_RETURN_IF_ERROR(cur.Read(&raw_type, "value type of key " + Quote(e.key)));
    VLMD_RETURN_IF_ERROR(ParseValue(cur, e.key, raw_type, opts, &e.value));
    metadata.push_back(e);
  }

  if (auto it = key_index.find("general.alignment"); it != key_index.end()) {
    const MetadataValue* a = &metadata[it->second].value;
    if (a->type != ValueType::kUint32) {
      return DataLossError("general.alignment has type " + std::string(ValueTypeName(a->type)) +
                           ", expected u32");
    }
    if (a->u == 0 || (a->u & (a->u - 1)) != 0) {
      return DataLossError("general.alignment " + std::to_string(a->u) +
                           " is not a non-zero power of two");
    }
    alignment = a->u;
  }

  tensors.reserve(n_tensors);
  tensor_index.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    VLMD_RETURN_IF_ERROR(ParseTensorInfo(cur, i, opts));
  }

  // The data section starts at the next multiple of the alignment. A file without tensors may
  // end before that padding (vocab-only files do), so only a file with tensors must contain it.
  data_offset = (cur.pos() + alignment - 1) / alignment * alignment;
  if (!tensors.empty() && data_offset > size) {
    return DataLossError("data section at offset " + std::to_string(data_offset) +
                         " starts past end of file (size " + std::to_string(size) + ")");
  }
  for (TensorInfo& t : tensors) VLMD_RETURN_IF_ERROR(CheckTensorData(t));
  VLMD_RETURN_IF_ERROR(CheckNoOverlap());
  looked_up = std::make_unique<std::atomic<bool>[]>(tensors.size());
  return Status::Ok();
}

GgufFile::GgufFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GgufFile::~GgufFile() = default;

Result<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path,
                                                 const OpenOptions& opts) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = "cannot open '" + path + "': " + std::strerror(err);
    if (err == ENOENT || err == ENOTDIR) return NotFoundError(msg);
    return Status(StatusCode::kUnavailable, msg);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgumentError("'" + path + "' is not a regular file");
  }
  auto impl = std::make_unique<Impl>();
  impl->size = static_cast<uint64_t>(st.st_size);
  if (impl->size > 0) {
    void* m = ::mmap(nullptr, impl->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return Status(StatusCode::kUnavailable,
                    "cannot map '" + path + "': " + std::strerror(err));
    }
    impl->mapping = m;
    impl->base = static_cast<const uint8_t*>(m);
  }
  ::close(fd);  // the mapping stays valid without the descriptor
  if (impl->base == nullptr) {
    static const uint8_t kEmpty[1] = {0};
    impl->base = kEmpty;  // an empty file fails parsing at the magic
  }
  Status s = impl->Parse(opts);
  if (!s.ok()) return s.WithContext(path);
  return std::unique_ptr<GgufFile>(new GgufFile(std::move(impl)));
}

Result<std::unique_ptr<GgufFile>> GgufFile::FromSecureBuffer(SecureBuffer&& buffer,
                                                             const OpenOptions& opts) {
  auto impl = std::make_unique<Impl>();
  impl->secure = std::move(buffer);
  impl->size = impl->secure.size();
  static const uint8_t kEmpty[1] = {0};
  impl->base = impl->size > 0 ? impl->secure.data() : kEmpty;  // empty: fails at the magic
  VLMD_RETURN_IF_ERROR(impl->Parse(opts));
  return std::unique_ptr<GgufFile>(new GgufFile(std::move(impl)));
}

Result<std::unique_ptr<GgufFile>> GgufFile::FromBytes(std::span<const uint8_t> bytes,
                                                      const OpenOptions& opts) {
  auto impl = std::make_unique<Impl>();
  impl->size = bytes.size();
  // aligned_alloc needs a size that is a multiple of the alignment (and non-zero).
  const size_t alloc = (bytes.size() / kBufferAlignment + 1) * kBufferAlignment;
  impl->owned = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlignment, alloc));
  if (impl->owned == nullptr) {
    return ResourceExhaustedError("cannot allocate " + std::to_string(alloc) + " bytes");
  }
  if (!bytes.empty()) std::memcpy(impl->owned, bytes.data(), bytes.size());
  impl->base = impl->owned;
  VLMD_RETURN_IF_ERROR(impl->Parse(opts));
  return std::unique_ptr<GgufFile>(new GgufFile(std::move(impl)));
}

uint32_t GgufFile::version() const { return impl_->version; }
uint64_t GgufFile::alignment() const { return impl_->alignment; }
uint64_t GgufFile::file_size() const { return impl_->size; }
uint64_t GgufFile::data_offset() const { return impl_->data_offset; }
std::span<const uint8_t> GgufFile::content() const { return {impl_->base, impl_->size}; }
bool GgufFile::decrypted() const { return impl_->secure.data() != nullptr; }
bool GgufFile::locked_in_memory() const { return impl_->secure.locked(); }
const std::vector<MetadataEntry>& GgufFile::metadata() const { return impl_->metadata; }
const std::vector<TensorInfo>& GgufFile::tensors() const { return impl_->tensors; }

const MetadataValue* GgufFile::Find(std::string_view key) const {
  auto it = impl_->key_index.find(key);
  return it == impl_->key_index.end() ? nullptr : &impl_->metadata[it->second].value;
}

const TensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = impl_->tensor_index.find(name);
  if (it == impl_->tensor_index.end()) return nullptr;
  impl_->looked_up[it->second].store(true, std::memory_order_relaxed);
  return &impl_->tensors[it->second];
}

std::vector<std::string_view> GgufFile::TensorsNeverLookedUp() const {
  std::vector<std::string_view> names;
  for (size_t i = 0; i < impl_->tensors.size(); ++i) {
    if (!impl_->looked_up[i].load(std::memory_order_relaxed)) names.push_back(impl_->tensors[i].name);
  }
  return names;
}

uint64_t GgufFile::released_bytes() const { return impl_->released.load(std::memory_order_relaxed); }

uint64_t GgufFile::ReleasePages(const void* data, uint64_t size) const {
  const auto [first, last] = PagesInside(data, size);
  if (last <= first) return 0;
  uint64_t added = 0;
  if (impl_->secure.data() != nullptr) {
    added = impl_->secure.ReleaseRange(reinterpret_cast<const void*>(first), last - first);
  } else {
    if (::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED) != 0) return 0;
    std::lock_guard<std::mutex> lock(impl_->released_mu);
    added = impl_->mapped_released.Add(first, last);
  }
  impl_->released.fetch_add(added, std::memory_order_relaxed);
  return added;
}

std::pair<uintptr_t, uintptr_t> GgufFile::PagesInside(const void* data, uint64_t size) const {
  const uint8_t* image = impl_->secure.data() != nullptr ? impl_->secure.data()
                         : impl_->mapping != nullptr     ? impl_->base
                                                         : nullptr;
  if (image == nullptr || data == nullptr || size == 0) return {0, 0};
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const auto image_begin = reinterpret_cast<uintptr_t>(image);
  if (begin < image_begin || begin - image_begin > impl_->size || size > impl_->size ||
      begin - image_begin + size > impl_->size) {
    return {0, 0};
  }
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  return {(begin + page - 1) / page * page, (begin + size) / page * page};
}

}  // namespace vlmd::engine::gguf
