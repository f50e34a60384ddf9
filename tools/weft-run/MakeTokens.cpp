//===- MakeTokens.cpp - weft-make-tokens: text -> byte-level tokens -------===//
//
// weft-make-tokens INPUT.txt OUTPUT.bin: every byte of the input becomes one
// token (vocabulary 256), written as an llm.c token file.
//
//===----------------------------------------------------------------------===//

#include "weft/exec/DataLoader.h"
#include "weft/exec/Error.h"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

int main(int argc, char **argv) {
  if (argc != 3) {
    std::fputs("usage: weft-make-tokens INPUT.txt OUTPUT.bin\n", stderr);
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "weft-make-tokens: error: %s: cannot open\n", argv[1]);
    return 1;
  }
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  std::vector<uint16_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i)
    tokens[i] = uint16_t(static_cast<unsigned char>(text[i]));
  try {
    weft::exec::writeLlmcTokens(argv[2], tokens.data(), int64_t(tokens.size()));
  } catch (const weft::exec::Error &error) {
    std::fprintf(stderr, "weft-make-tokens: error: %s\n", error.what());
    return 1;
  }
  std::printf("%s: %zu tokens (byte-level, vocab 256)\n", argv[2],
              tokens.size());
  return 0;
}
