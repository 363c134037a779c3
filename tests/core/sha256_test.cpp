// SHA-256 known answers (FIPS 180-2 examples) and incremental = one-shot.
#include "core/sha256.h"

#include <string>

#include <gtest/gtest.h>

namespace vlmd {
namespace {

std::span<const uint8_t> AsBytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(Sha256, KnownAnswers) {
  EXPECT_EQ(DigestHex(Sha256Of(AsBytes("abc"))),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(DigestHex(Sha256Of({})),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(DigestHex(Sha256Of(AsBytes(two_blocks))),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, IncrementalMatchesOneShotAndResets) {
  const std::string msg(1000, 'a');
  Sha256 h;
  for (size_t i = 0; i < msg.size(); i += 77) h.Update(AsBytes(msg.substr(i, 77)));
  EXPECT_EQ(h.Finish(), Sha256Of(AsBytes(msg)));
  h.Update(AsBytes("abc"));  // reusable after Finish
  EXPECT_EQ(DigestHex(h.Finish()),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace vlmd
