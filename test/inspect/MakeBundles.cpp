//===- MakeBundles.cpp - Bundles for weft-inspect's CLI tests -------------===//
//
// weft-inspect-testgen DIR writes DIR/{dp,pp,zero3,gpipe,deadlock}: the unit
// tests' plans as bundles on disk. "deadlock" loads but fails verification.
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
  } catch (const plan::Error &error) {
    std::cerr << "weft-inspect-testgen: " << error.what() << "\n";
    return 1;
  }
  return 0;
}
