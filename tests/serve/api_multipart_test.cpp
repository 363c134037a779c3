// multipart/form-data parsing (serve/api/multipart.h): what clients send, and hostile bodies.
#include "serve/api/multipart.h"

#include <gtest/gtest.h>

namespace vlmd::serve::api {
namespace {

const char kType[] = "multipart/form-data; boundary=XyZ";

std::string Part(const std::string& disposition, const std::string& content, const std::string& extra = "") {
  return "--XyZ\r\nContent-Disposition: " + disposition + "\r\n" + extra + "\r\n" + content + "\r\n";
}

TEST(Multipart, PartsInOrderWithNamesFilenamesAndTypes) {
  const std::string body = "preamble\r\n" + Part("form-data; name=\"request\"", "{\"prompt\":\"hi\"}",
                                                   "Content-Type: application/json\r\n") +
                           Part("form-data; name=image; filename=\"a;b.png\"", std::string("\x89PNG\r\n\0x", 8)) +
                           "--XyZ--\r\nepilogue";
  auto parts = ParseMultipart(body, kType);
  ASSERT_TRUE(parts.ok()) << parts.status().ToString();
  ASSERT_EQ(parts->size(), 2u);
  EXPECT_EQ((*parts)[0].name, "request");
  EXPECT_EQ((*parts)[0].content_type, "application/json");
  EXPECT_EQ((*parts)[0].content, "{\"prompt\":\"hi\"}");
  EXPECT_EQ((*parts)[1].name, "image");
  EXPECT_EQ((*parts)[1].filename, "a;b.png");
  EXPECT_EQ((*parts)[1].content, std::string("\x89PNG\r\n\0x", 8));  // CRLF and NUL inside kept
}

TEST(Multipart, ParametersWithoutValuesAreSkippedAndTheTypeIsExact) {
  auto parts = ParseMultipart(Part("form-data; inline; name=\"a\"", "1") + "--XyZ--", kType);
  ASSERT_TRUE(parts.ok()) << parts.status().ToString();
  EXPECT_EQ((*parts)[0].name, "a");
  EXPECT_TRUE(IsMultipartFormData(" Multipart/Form-Data ; boundary=x"));
  EXPECT_FALSE(IsMultipartFormData("multipart/form-dataX; boundary=x"));
  EXPECT_FALSE(IsMultipartFormData("multipart/mixed; boundary=x"));
  // The JSON endpoints' check: media types have no case, parameters do not count.
  EXPECT_TRUE(HasMediaType("Application/JSON", "application/json"));
  EXPECT_TRUE(HasMediaType(" application/json ; charset=utf-8", "application/json"));
  EXPECT_FALSE(HasMediaType("application/jsonx", "application/json"));
  EXPECT_FALSE(HasMediaType("application/jso", "application/json"));
  EXPECT_FALSE(HasMediaType("", "application/json"));
}

TEST(Multipart, BoundaryParameterQuotedOrNotAnyCase) {
  EXPECT_EQ(*MultipartBoundary("multipart/form-data; boundary=abc"), "abc");
  EXPECT_EQ(*MultipartBoundary("Multipart/Form-Data; charset=utf-8; BOUNDARY=\"a b;c\""), "a b;c");
  EXPECT_FALSE(MultipartBoundary("multipart/form-data").ok());
  EXPECT_FALSE(MultipartBoundary("multipart/form-data; boundary=").ok());
  EXPECT_FALSE(MultipartBoundary("multipart/form-data; boundary=" + std::string(71, 'b')).ok());
  EXPECT_FALSE(MultipartBoundary("multipart/form-data; boundary=\"unterminated").ok());
  EXPECT_FALSE(MultipartBoundary("application/json; boundary=abc").ok());
}

TEST(Multipart, HostileBodiesAreErrorsThatSayWhy) {
  const std::string good = Part("form-data; name=\"request\"", "{}");
  struct Case {
    const char* name;
    std::string body;
    const char* says;
  };
  const Case cases[] = {
      {"empty", "", "without its boundary"},
      {"no boundary at all", "just text", "without its boundary"},
      {"truncated: no closing boundary", good.substr(0, good.size() - 4), "truncated"},
      {"part without a name", Part("form-data", "x") + "--XyZ--", "no Content-Disposition"},
      {"part not form-data", Part("attachment; name=\"a\"", "x") + "--XyZ--", "no Content-Disposition"},
      {"header line without a colon", "--XyZ\r\nnonsense\r\n\r\nx\r\n--XyZ--", "malformed header"},
      {"headers never end", "--XyZ\r\nContent-Disposition: form-data; name=a\r\n" + std::string(10000, 'h'),
       "headers unterminated"},
      {"boundary glued to content", "--XyZjunk\r\n", "not followed by a line end"},
      {"65 parts", [] {
         std::string b;
         for (int i = 0; i < 65; ++i) b += Part("form-data; name=\"p\"", "x");
         return b + "--XyZ--";
       }(),
       "more than 64"},
  };
  for (const Case& c : cases) {
    auto parts = ParseMultipart(c.body, kType);
    ASSERT_FALSE(parts.ok()) << c.name;
    EXPECT_EQ(parts.status().code(), StatusCode::kInvalidArgument) << c.name;
    EXPECT_NE(parts.status().message().find(c.says), std::string::npos) << c.name << ": " << parts.status().message();
  }
  // 64 parts are fine.
  std::string b;
  for (int i = 0; i < 64; ++i) b += Part("form-data; name=\"p\"", "x");
  EXPECT_TRUE(ParseMultipart(b + "--XyZ--", kType).ok());
}

}  // namespace
}  // namespace vlmd::serve::api
