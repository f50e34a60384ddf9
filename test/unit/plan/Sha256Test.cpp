//===- Sha256Test.cpp - FIPS 180-4 known-answer tests ---------------------===//

#include "weft/plan/Sha256.h"

#include <gtest/gtest.h>

using namespace weft::plan;

TEST(Sha256, KnownAnswers) {
  EXPECT_EQ(sha256Hex(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256Hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(
      sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
      "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(
      sha256Hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmn"
                "hijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu"),
      "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Message lengths around the 55/56/64-byte padding boundaries, fed in pieces
// that straddle block boundaries, must hash like one update.
TEST(Sha256, IncrementalMatchesOneShot) {
  for (size_t length : {55, 56, 63, 64, 65, 127, 128, 200}) {
    std::string message;
    for (size_t i = 0; i < length; ++i)
      message += char('a' + i % 26);
    for (size_t piece : {1, 7, 63, 64}) {
      Sha256 hasher;
      for (size_t at = 0; at < message.size(); at += piece)
        hasher.update(std::string_view(message).substr(at, piece));
      EXPECT_EQ(hasher.finishHex(), sha256Hex(message))
          << "length " << length << " piece " << piece;
    }
  }
}
