// Importance matrix files (see imatrix.h).
#include "engine/gguf/imatrix.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/read_file.h"
#include "core/temp_file.h"
#include "engine/gguf/gguf_reader.h"
#include "engine/gguf/gguf_writer.h"

namespace vlmd::engine::gguf {
namespace {

constexpr std::string_view kSumSuffix = ".in_sum2";
constexpr std::string_view kCountSuffix = ".counts";
// Limits of a real model, so a hostile legacy header cannot make the reader allocate without
// bound: entries (a few thousand matrices at most), name bytes, values per entry (columns x
// experts of the largest MoE matrices are ~10^7).
constexpr int64_t kMaxEntries = 1 << 20;
constexpr int64_t kMaxNameBytes = 1024;

bool AllFiniteNonNegative(std::span<const float> v) {
  for (float x : v) {
    if (!std::isfinite(x) || x < 0) return false;
  }
  return true;
}

Status CheckEntry(const std::string& name, const ImatrixEntry& e) {
  if (e.counts.empty() || e.n_cols <= 0 ||
      e.sum_sq.size() != e.counts.size() * static_cast<size_t>(e.n_cols)) {
    return DataLossError("imatrix entry '" + name + "': " + std::to_string(e.sum_sq.size()) +
                         " sums do not fit " + std::to_string(e.counts.size()) + " counts");
  }
  if (!AllFiniteNonNegative(e.sum_sq) || !AllFiniteNonNegative(e.counts)) {
    return DataLossError("imatrix entry '" + name + "': a negative or non-finite value");
  }
  for (float c : e.counts) {
    // Counts are rows summed: whole numbers (a fraction in (0, 1) would make sum / count blow
    // up to infinity).
    if (c != std::floor(c)) return DataLossError("imatrix entry '" + name + "': a count that is not a whole number");
  }
  return Status::Ok();
}

std::vector<float> ReadF32(const TensorInfo& t) {
  std::vector<float> out(static_cast<size_t>(t.n_elements()));
  if (!out.empty()) std::memcpy(out.data(), t.data, out.size() * sizeof(float));
  return out;
}

Result<ImportanceMatrix> ParseGguf(std::span<const uint8_t> bytes) {
  VLMD_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> f, GgufFile::FromBytes(bytes));
  ImportanceMatrix m;
  if (f->Find("imatrix.datasets") != nullptr) {
    VLMD_ASSIGN_OR_RETURN(std::vector<std::string_view> names, f->GetStringArray("imatrix.datasets"));
    m.datasets.assign(names.begin(), names.end());
  }
  if (f->Find("imatrix.chunk_count") != nullptr) {
    VLMD_ASSIGN_OR_RETURN(m.chunk_count, f->GetU32("imatrix.chunk_count"));
  }
  if (f->Find("imatrix.chunk_size") != nullptr) {
    VLMD_ASSIGN_OR_RETURN(m.chunk_size, f->GetU32("imatrix.chunk_size"));
  }
  for (const TensorInfo& t : f->tensors()) {
    const std::string_view tn = t.name;
    if (tn.size() > kCountSuffix.size() && tn.ends_with(kCountSuffix)) {
      const std::string base(tn.substr(0, tn.size() - kCountSuffix.size()));
      if (f->FindTensor(base + std::string(kSumSuffix)) == nullptr) {
        return DataLossError("imatrix tensor '" + std::string(tn) + "' has no " + base +
                             std::string(kSumSuffix));
      }
      continue;  // read with its sums
    }
    if (tn.size() <= kSumSuffix.size() || !tn.ends_with(kSumSuffix)) {
      return DataLossError("imatrix tensor '" + std::string(tn) + "' is neither sums (" +
                           std::string(kSumSuffix) + ") nor counts (" + std::string(kCountSuffix) + ")");
    }
    const std::string base(tn.substr(0, tn.size() - kSumSuffix.size()));
    const TensorInfo* counts = f->FindTensor(base + std::string(kCountSuffix));
    if (counts == nullptr) {
      return DataLossError("imatrix tensor '" + std::string(tn) + "' has no " + base +
                           std::string(kCountSuffix));
    }
    if (t.type != DType::kF32 || counts->type != DType::kF32) {
      return DataLossError("imatrix entry '" + base + "': sums and counts must be F32");
    }
    // Sums [n_cols, n_mat], counts [1, n_mat] (llama-imatrix's shapes).
    if (t.n_dims > 2 || counts->n_dims > 2 || counts->ne[0] != 1 || counts->ne[1] != t.ne[1]) {
      return DataLossError("imatrix entry '" + base + "': sums and counts are not [columns, n] and [1, n]");
    }
    ImatrixEntry e;
    e.counts = ReadF32(*counts);
    e.sum_sq = ReadF32(t);
    e.n_cols = e.counts.empty() ? 0 : static_cast<int64_t>(e.sum_sq.size() / e.counts.size());
    VLMD_RETURN_IF_ERROR(CheckEntry(base, e));
    m.entries.emplace(base, std::move(e));
  }
  return m;
}

// Reads the legacy binary layout from the front of `bytes`.
class LegacyReader {
 public:
  explicit LegacyReader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  bool done() const { return at_ == bytes_.size(); }
  Result<int32_t> I32(const char* what) {
    if (bytes_.size() - at_ < 4) return DataLossError(std::string("imatrix truncated in ") + what);
    int32_t v;
    std::memcpy(&v, bytes_.data() + at_, 4);
    at_ += 4;
    return v;
  }
  Result<std::string> Bytes(int64_t n, const char* what) {
    if (n < 0 || static_cast<uint64_t>(n) > bytes_.size() - at_) {
      return DataLossError(std::string("imatrix truncated in ") + what);
    }
    std::string s(reinterpret_cast<const char*>(bytes_.data() + at_), static_cast<size_t>(n));
    at_ += static_cast<size_t>(n);
    return s;
  }
  Result<std::vector<float>> Floats(int64_t n, const char* what) {
    if (n < 0 || static_cast<uint64_t>(n) > (bytes_.size() - at_) / 4) {
      return DataLossError(std::string("imatrix truncated in ") + what);
    }
    std::vector<float> v(static_cast<size_t>(n));
    if (n > 0) std::memcpy(v.data(), bytes_.data() + at_, static_cast<size_t>(n) * 4);
    at_ += static_cast<size_t>(n) * 4;
    return v;
  }

 private:
  std::span<const uint8_t> bytes_;
  size_t at_ = 0;
};

Result<ImportanceMatrix> ParseLegacy(std::span<const uint8_t> bytes) {
  LegacyReader r(bytes);
  VLMD_ASSIGN_OR_RETURN(const int32_t n_entries, r.I32("the entry count"));
  if (n_entries < 1 || n_entries > kMaxEntries) {
    return DataLossError("imatrix: " + std::to_string(n_entries) + " entries (not a GGUF or legacy imatrix file?)");
  }
  ImportanceMatrix m;
  for (int32_t i = 0; i < n_entries; ++i) {
    VLMD_ASSIGN_OR_RETURN(const int32_t len, r.I32("a name length"));
    if (len < 1 || len > kMaxNameBytes) {
      return DataLossError("imatrix entry " + std::to_string(i) + ": name length " + std::to_string(len));
    }
    VLMD_ASSIGN_OR_RETURN(std::string name, r.Bytes(len, "a name"));
    VLMD_ASSIGN_OR_RETURN(const int32_t ncall, r.I32("a call count"));
    VLMD_ASSIGN_OR_RETURN(const int32_t nval, r.I32("a value count"));
    if (ncall < 0 || nval < 1) {
      return DataLossError("imatrix entry '" + name + "': " + std::to_string(ncall) + " calls, " +
                           std::to_string(nval) + " values");
    }
    ImatrixEntry e;
    e.n_cols = nval;
    // llama.cpp's legacy reader divides by ncall only when it is positive: keep the values then.
    e.counts = {static_cast<float>(ncall > 0 ? ncall : 1)};
    VLMD_ASSIGN_OR_RETURN(e.sum_sq, r.Floats(nval, "the values"));
    VLMD_RETURN_IF_ERROR(CheckEntry(name, e));
    if (!m.entries.emplace(name, std::move(e)).second) {
      return DataLossError("imatrix entry '" + name + "' appears twice");
    }
  }
  if (r.done()) return m;  // older files end here
  VLMD_ASSIGN_OR_RETURN(const int32_t chunks, r.I32("the chunk count"));
  if (chunks < 0) return DataLossError("imatrix: negative chunk count");
  m.chunk_count = static_cast<uint32_t>(chunks);
  if (r.done()) return m;
  VLMD_ASSIGN_OR_RETURN(const int32_t len, r.I32("the dataset name length"));
  if (len < 0 || len > 65536) return DataLossError("imatrix: dataset name length " + std::to_string(len));
  VLMD_ASSIGN_OR_RETURN(std::string dataset, r.Bytes(len, "the dataset name"));
  m.datasets.push_back(std::move(dataset));
  if (!r.done()) return DataLossError("imatrix: bytes after the dataset name");
  return m;
}

}  // namespace

std::vector<float> ImportanceMatrix::Importance(const std::string& name) const {
  auto it = entries.find(name);
  if (it == entries.end()) return {};
  const ImatrixEntry& e = it->second;
  std::vector<float> out(e.sum_sq.size());
  for (size_t j = 0; j < e.counts.size(); ++j) {
    const float count = e.counts[j];
    for (int64_t i = 0; i < e.n_cols; ++i) {
      const size_t at = j * static_cast<size_t>(e.n_cols) + static_cast<size_t>(i);
      out[at] = count > 0 ? e.sum_sq[at] / count : 1.0f;  // an expert never routed to: uniform
    }
  }
  return out;
}

Result<ImportanceMatrix> ParseImatrix(std::span<const uint8_t> bytes) {
  if (bytes.size() >= 4 && std::memcmp(bytes.data(), "GGUF", 4) == 0) return ParseGguf(bytes);
  return ParseLegacy(bytes);
}

Result<ImportanceMatrix> ReadImatrixFile(const std::string& path) {
  auto file = ReadWholeFile(path);
  if (!file.ok()) return file.status().WithContext("imatrix file");
  auto m = ParseImatrix(BytesOf(*file));
  if (!m.ok()) return Status(m.status().code(), path + ": " + m.status().message());
  return m;
}

Result<std::vector<uint8_t>> SerializeImatrix(const ImportanceMatrix& m) {
  GgufWriter w;
  w.SetString("general.type", "imatrix");
  w.SetStringArray("imatrix.datasets", std::span<const std::string>(m.datasets));
  w.SetU32("imatrix.chunk_count", m.chunk_count);
  w.SetU32("imatrix.chunk_size", m.chunk_size);
  for (const auto& [name, e] : m.entries) {
    if (e.counts.empty() || e.n_cols <= 0 ||
        e.sum_sq.size() != e.counts.size() * static_cast<size_t>(e.n_cols)) {
      return InvalidArgumentError("imatrix entry '" + name + "': sums do not fit its counts");
    }
    const int64_t n_mat = static_cast<int64_t>(e.counts.size());
    const int64_t sum_ne[2] = {e.n_cols, n_mat};
    const int64_t count_ne[2] = {1, n_mat};
    VLMD_RETURN_IF_ERROR(w.AddTensor(
        name + std::string(kSumSuffix), DType::kF32, sum_ne,
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(e.sum_sq.data()), e.sum_sq.size() * 4)));
    VLMD_RETURN_IF_ERROR(w.AddTensor(
        name + std::string(kCountSuffix), DType::kF32, count_ne,
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(e.counts.data()), e.counts.size() * 4)));
  }
  return w.WriteBytes();
}

Status WriteImatrixFile(const ImportanceMatrix& m, const std::string& path) {
  VLMD_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, SerializeImatrix(m));
  return WriteFileAtomically(path, bytes).WithContext("imatrix file");
}

}  // namespace vlmd::engine::gguf
