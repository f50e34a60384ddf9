//===- RtcCheck.cpp - NVRTC over a bundle's generated kernels, no GPU -----===//
//
// weft-nvrtc-check BUNDLE ARCH CACHE_DIR|off: compiles every generated kernel
// source of BUNDLE for sm_ARCH through the CUDA backend's KernelCompiler (the
// code `weft-run --backend cuda --generated-kernels` runs at load; NVRTC
// needs no GPU), requires each cubin to be an ELF that defines every entry
// the source's launch lines name, and prints
//   "<n> sources: <c> compiled, <h> from the cache"
// then each warning as "warning: ...". Exit 1 on an error (printed as one
// line), 2 on usage. test/unit/cuda/nvrtc.sh drives it.
//
//===----------------------------------------------------------------------===//

#include "weft/exec/Error.h"
#include "weft/exec/cuda/GeneratedKernels.h"
#include "weft/plan/Serialize.h"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <set>
#include <string>

int main(int argc, char **argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: weft-nvrtc-check BUNDLE ARCH CACHE_DIR|off\n");
    return 2;
  }
  try {
    weft::plan::Bundle bundle = weft::plan::loadBundle(argv[1]);
    int arch = std::atoi(argv[2]);
    std::string cache = argv[3];
    weft::exec::cuda::KernelCompiler compiler(cache == "off" ? "" : cache);
    std::set<std::string> sources;
    for (const weft::plan::Kernel &kernel : bundle.kernels) {
      if (!sources.insert(kernel.source).second)
        continue;
      const std::string &source = bundle.files.at(kernel.source);
      std::string cubin = compiler.cubin(source, kernel.source, arch);
      if (cubin.compare(0, 4,
                        "\x7f"
                        "ELF") != 0)
        throw weft::exec::Error(kernel.source + ": the cubin is not an ELF");
      for (const auto &launch :
           weft::exec::parseLaunches(source, kernel.source, kernel.name))
        // Symbol names are NUL-terminated in the ELF string table.
        if (cubin.find(launch.entry + std::string(1, '\0')) ==
            std::string::npos)
          throw weft::exec::Error(kernel.source + ": the cubin defines no '" +
                                  launch.entry + "'");
    }
    std::printf("%zu sources: %d compiled, %d from the cache\n", sources.size(),
                compiler.compiled(), compiler.cacheHits());
    for (const std::string &warning : compiler.warnings())
      std::printf("warning: %s\n", warning.c_str());
  } catch (const std::exception &error) {
    std::fprintf(stderr, "error: %s\n", error.what());
    return 1;
  }
  return 0;
}
