// Base64 against the RFC 4648 section 10 test vectors, round trips over all byte values, the
// size limit, and the data URI forms accepted and refused.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "serve/api/requests.h"

namespace vlmd::serve::api {
namespace {

constexpr size_t kNoLimit = ~size_t{0};

const std::vector<std::pair<std::string, std::string>> kRfc4648 = {
    {"", ""},
    {"f", "Zg=="},
    {"fo", "Zm8="},
    {"foo", "Zm9v"},
    {"foob", "Zm9vYg=="},
    {"fooba", "Zm9vYmE="},
    {"foobar", "Zm9vYmFy"},
};

TEST(ApiBase64, Rfc4648Vectors) {
  for (const auto& [plain, encoded] : kRfc4648) {
    EXPECT_EQ(EncodeBase64(plain), encoded);
    auto d = DecodeBase64(encoded, kNoLimit);
    ASSERT_TRUE(d.ok()) << encoded << ": " << d.status().ToString();
    EXPECT_EQ(*d, plain);
    // Padding is optional.
    std::string unpadded = encoded;
    while (!unpadded.empty() && unpadded.back() == '=') unpadded.pop_back();
    auto u = DecodeBase64(unpadded, kNoLimit);
    ASSERT_TRUE(u.ok()) << unpadded << ": " << u.status().ToString();
    EXPECT_EQ(*u, plain);
  }
}

TEST(ApiBase64, AlphabetEndsWithPlusSlash) {
  EXPECT_EQ(EncodeBase64(std::string("\xfb\xff\xbf", 3)), "+/+/");
  auto d = DecodeBase64("+/+/", kNoLimit);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, std::string("\xfb\xff\xbf", 3));
  // The URL-safe alphabet is a different encoding.
  EXPECT_EQ(DecodeBase64("-_-_", kNoLimit).status().code(), StatusCode::kInvalidArgument);
}

TEST(ApiBase64, RoundTripAllBytesAndLengths) {
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  for (size_t len = 0; len <= all.size(); ++len) {
    const std::string bytes = all.substr(all.size() - len);
    const std::string enc = EncodeBase64(bytes);
    EXPECT_EQ(enc.size(), (len + 2) / 3 * 4);
    auto dec = DecodeBase64(enc, len);  // exactly at the limit is allowed
    ASSERT_TRUE(dec.ok()) << len << ": " << dec.status().ToString();
    EXPECT_EQ(*dec, bytes);
  }
}

TEST(ApiBase64, SizeLimitIsCheckedFromTheLength) {
  EXPECT_TRUE(DecodeBase64("Zm9vYmFy", 6).ok());
  EXPECT_EQ(DecodeBase64("Zm9vYmFy", 5).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(DecodeBase64("Zm9vYg", 3).status().code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(DecodeBase64("Zm9vYg", 4).ok());
  // Length decides before content: invalid characters over the limit still say OUT_OF_RANGE.
  EXPECT_EQ(DecodeBase64("!!!!!!!!", 5).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(DecodeBase64("!!!!!!!!", 6).status().code(), StatusCode::kInvalidArgument);
}

TEST(ApiBase64, StrictRejections) {
  for (const char* bad :
       {"Zm9v YmFy", "Zm9v\nYmFy", " Zm9v", "Zm9v\r\n", "Zm9v\t", "Zm9",   "Z",
        "Zm9vY",     "Zg=",        "Zg===", "=",        "==",     "Zm8==", "Zm=8",
        "Zg==Zg==",  "Zh==",       "Zm9=",  "Zm9vYmF",  "Zm9v%",  "Zm9v.", "Zm9v\x80"}) {
    auto r = DecodeBase64(bad, kNoLimit);
    EXPECT_FALSE(r.ok()) << "accepted: " << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    }
  }
  // The offending byte is named by offset and value, never echoed raw.
  auto r = DecodeBase64("AAAA\x01", kNoLimit);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("0x01 at offset 4"), std::string::npos)
      << r.status().message();
}

TEST(ApiDataUri, AcceptedForms) {
  const std::vector<std::string> ok = {
      "data:image/png;base64,Zm9v",     "data:;base64,Zm9v",
      "DATA:Image/PNG;BASE64,Zm9v",     "data:image/jpeg;name=cat.jpg;base64,Zm9v",
      "data:image/svg+xml;base64,Zm9v", "data:application/octet-stream;base64,Zm9v",
      "data:image/png;base64,Zm9v",
  };
  for (const std::string& uri : ok) {
    auto r = DecodeDataUri(uri, kNoLimit);
    ASSERT_TRUE(r.ok()) << uri << ": " << r.status().ToString();
    EXPECT_EQ(*r, "foo");
  }
  auto empty = DecodeDataUri("data:image/png;base64,", kNoLimit);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, "");
}

TEST(ApiDataUri, RefusedForms) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"image/png;base64,Zm9v", "must start with 'data:'"},
      {"data:image/png,Zm9v", "only ';base64'"},
      {"data:,Zm9v", "only ';base64'"},
      {"data:text/plain;charset=utf-8,hello", "only ';base64'"},
      {"data:image/png;base64", "missing ','"},
      {"data:image/png;base64;x=y,Zm9v", "only ';base64'"},
      {"data:image png;base64,Zm9v", "malformed media type"},
      {"data:image/;base64,Zm9v", "malformed media type"},
      {"data:image;base64,Zm9v", "malformed media type"},
      {"data:image/png;charset;base64,Zm9v", "malformed parameter"},
      {"data:image/png;a=b;;base64,Zm9v", "malformed parameter"},
      {"data:image/png;base64,Zm9v YmFy", "data URI: base64: invalid character"},
      {"data:image/png;base64,Zm9vY", "data URI: base64: truncated"},
      {"data:image/png;base64,%5A%6D", "data URI: base64: invalid character"},
      {"data:" + std::string(300, 'a') + "/png;base64,Zm9v", "missing ','"},
  };
  for (const auto& [uri, why] : bad) {
    auto r = DecodeDataUri(uri, kNoLimit);
    ASSERT_FALSE(r.ok()) << uri;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << uri;
    EXPECT_NE(r.status().message().find(why), std::string::npos)
        << uri << ": " << r.status().message();
  }
}

TEST(ApiDataUri, SizeLimit) {
  EXPECT_TRUE(DecodeDataUri("data:image/png;base64,Zm9v", 3).ok());
  auto r = DecodeDataUri("data:image/png;base64,Zm9v", 2);
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(r.status().message().rfind("data URI: decoded size 3 bytes", 0), 0u)
      << r.status().message();
}

}  // namespace
}  // namespace vlmd::serve::api
