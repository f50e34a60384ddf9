//===- MakeBundles.cpp - Bundles for weft-inspect's CLI tests -------------===//
//
// weft-inspect-testgen DIR writes DIR/{dp,pp,zero3,gpipe,deadlock}: the unit
// tests' plans as bundles on disk. "deadlock" loads but fails verification.
// Their kernel 'embed' is no runtime kernel, which `verify` reports; the
// dp-embedding* bundles launch the registry's embedding_forward instead:
// as its signature wants, with a table too small, and writing over the
// table it reads.
//
//===----------------------------------------------------------------------===//

#include "InspectBundles.h"

#include "weft/plan/Error.h"
#include "weft/plan/Serialize.h"

#include <iostream>

using namespace weft;
using namespace weft::inspect::test;

int main(int argc, char **argv) {
  if (argc != 2) {
    std::cerr << "usage: weft-inspect-testgen DIR\n";
    return 2;
  }
  std::string dir = argv[1];
  try {
    plan::writeBundle(dataParallelBundle(), dir + "/dp");
    plan::writeBundle(pipelineBundle(), dir + "/pp");
    plan::writeBundle(shardedZero3Bundle(), dir + "/zero3");
    plan::writeBundle(gpipeBundle(2, 2, 2, 2, 2), dir + "/gpipe");
    plan::Bundle deadlock = pipelineBundle();
    // Stage 0 waits for the gradient before it sends the activation.
    std::swap(deadlock.programs[0].streams[0].instructions[2],
              deadlock.programs[0].streams[0].instructions[3]);
    plan::writeBundle(deadlock, dir + "/deadlock");

    // dp's launch (stream 0, instruction 1) reads the tokens (16 i32) and
    // the table w (64 f32) and writes act (64 f32): embedding_forward with
    // 16 tokens of width 4 over a vocabulary of 16.
    plan::Bundle embedding = dataParallelBundle();
    embedding.kernels[0].name = "embedding_forward";
    embedding.kernels[0].constants = {
        {"batch", 1}, {"seq", 16}, {"hidden", 4}, {"vocab", 16}};
    embedding.programs[0].buffers[3].dtype = plan::DType::I32;
    plan::writeBundle(embedding, dir + "/dp-embedding");
    plan::Bundle small = embedding;
    small.kernels[0].constants["vocab"] = 32;
    plan::writeBundle(small, dir + "/dp-embedding-small");
    plan::Bundle overlap = embedding;
    plan::Instruction &launch = overlap.programs[0].streams[0].instructions[1];
    launch.writes[0] = launch.reads[1];
    plan::writeBundle(overlap, dir + "/dp-embedding-overlap");
  } catch (const plan::Error &error) {
    std::cerr << "weft-inspect-testgen: " << error.what() << "\n";
    return 1;
  }
  return 0;
}
