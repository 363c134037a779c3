// API key store: validation of the key file and constant-time authentication.
#include "serve/policy/api_keys.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <span>

#include "core/read_file.h"

namespace vlmd::serve::policy {
namespace {

constexpr size_t kMinKeyChars = 16;

Sha256Digest DigestOf(std::string_view s) {
  return Sha256Of(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool ParseHexDigest(const std::string& hex, Sha256Digest& out) {
  if (hex.size() != 64) return false;
  for (size_t i = 0; i < 32; ++i) {
    const int hi = HexValue(hex[2 * i]), lo = HexValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = uint8_t(hi * 16 + lo);
  }
  return true;
}

// Reads an optional non-negative finite number field.
Status ReadNumber(const nlohmann::json& entry, const char* field, const std::string& who,
                  double& out, bool& present) {
  present = false;
  auto it = entry.find(field);
  if (it == entry.end()) return Status::Ok();
  if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < 0) {
    return InvalidArgumentError(who + ": \"" + field + "\" must be a non-negative number");
  }
  out = it->get<double>();
  present = true;
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<ApiKeyStore>> ApiKeyStore::LoadFile(const std::string& path) {
  auto file = ReadWholeFile(path, uint64_t{16} << 20);  // ~100k keys
  if (!file.ok()) return file.status().WithContext("api key file");
  const std::string& text = *file;
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // e.what() quotes the text around the error, which may be a key: report the offset only.
    return InvalidArgumentError("api key file " + path + ": invalid JSON near byte " +
                                std::to_string(e.byte));
  }
  auto store = FromJson(doc);
  if (!store.ok()) return store.status().WithContext("api key file " + path);
  return store;
}

Result<std::unique_ptr<ApiKeyStore>> ApiKeyStore::FromJson(const nlohmann::json& doc) {
  if (!doc.is_object() || !doc.contains("keys") || !doc["keys"].is_array()) {
    return InvalidArgumentError("expected an object with a \"keys\" array");
  }
  std::unique_ptr<ApiKeyStore> store(new ApiKeyStore());
  std::set<std::string> ids;
  const nlohmann::json& keys = doc["keys"];
  for (size_t i = 0; i < keys.size(); ++i) {
    const nlohmann::json& e = keys[i];
    std::string who = "keys[" + std::to_string(i) + "]";
    if (!e.is_object()) return InvalidArgumentError(who + ": expected an object");
    auto id_it = e.find("id");
    if (id_it == e.end() || !id_it->is_string() || id_it->get<std::string>().empty()) {
      return InvalidArgumentError(who + ": \"id\" must be a non-empty string");
    }
    Entry entry;
    entry.key.id = id_it->get<std::string>();
    who += " (id \"" + entry.key.id + "\")";
    if (!ids.insert(entry.key.id).second) return InvalidArgumentError(who + ": duplicate id");
    for (const auto& [name, value] : e.items()) {
      if (name != "id" && name != "key" && name != "key_sha256" && name != "rate_per_s" &&
          name != "burst") {
        return InvalidArgumentError(who + ": unknown field \"" + name + "\"");
      }
    }
    const bool has_key = e.contains("key"), has_digest = e.contains("key_sha256");
    if (has_key == has_digest) {
      return InvalidArgumentError(who + ": needs exactly one of \"key\" or \"key_sha256\"");
    }
    if (has_key) {
      const nlohmann::json& k = e["key"];
      if (!k.is_string()) return InvalidArgumentError(who + ": \"key\" must be a string");
      if (k.get_ref<const std::string&>().size() < kMinKeyChars) {
        return InvalidArgumentError(who + ": key is shorter than " + std::to_string(kMinKeyChars) +
                                    " characters");
      }
      entry.digest = DigestOf(k.get_ref<const std::string&>());
    } else {
      const nlohmann::json& d = e["key_sha256"];
      if (!d.is_string() || !ParseHexDigest(d.get<std::string>(), entry.digest)) {
        return InvalidArgumentError(who + ": \"key_sha256\" must be 64 hex digits");
      }
    }
    bool has_rate = false, has_burst = false;
    VLMD_RETURN_IF_ERROR(ReadNumber(e, "rate_per_s", who, entry.key.rate_per_s, has_rate));
    VLMD_RETURN_IF_ERROR(ReadNumber(e, "burst", who, entry.key.burst, has_burst));
    if (has_burst && entry.key.burst < 1) {
      return InvalidArgumentError(who + ": \"burst\" must be at least 1");
    }
    if (!has_burst) entry.key.burst = std::max(1.0, entry.key.rate_per_s);
    for (const Entry& other : store->entries_) {
      // Two ids with one secret would make the id (and its rate limit) ambiguous.
      if (CRYPTO_memcmp(other.digest.data(), entry.digest.data(), entry.digest.size()) == 0) {
        return InvalidArgumentError(who + ": same key as id \"" + other.key.id + "\"");
      }
    }
    store->entries_.push_back(std::move(entry));
  }
  return store;
}

const ApiKey* ApiKeyStore::Authenticate(std::string_view presented) const {
  const Sha256Digest digest = DigestOf(presented);
  const ApiKey* match = nullptr;
  for (const Entry& e : entries_) {
    // No early exit: every entry is compared whatever the outcome. Which entry matched can only
    // show through the pointer select, and digests are distinct, so at most one ever does.
    const bool equal = CRYPTO_memcmp(e.digest.data(), digest.data(), digest.size()) == 0;
    match = equal ? &e.key : match;
  }
  return match;
}

}  // namespace vlmd::serve::policy
