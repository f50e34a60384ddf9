//===- CheckpointBench.cpp - Rank-file save/load throughput ---------------===//
//
// weft-checkpoint-bench DIR GIGABYTES [REPEATS]: writes a synthetic state of
// that size as one rank file (the code path Session::saveCheckpoint uses,
// streaming from memory with fsync) and reads it back with checksum
// verification, printing GB/s. Run N copies under mpirun for N ranks sharing
// one disk; each rank uses DIR/rank-<r>.bin (r from OMPI_COMM_WORLD_RANK).
// Full vs weights-only saves through a Session, loads and a raw-write
// baseline: `weft-bench-runtime checkpoint` (bench/runtime/BenchRuntime.cpp).
//
//===----------------------------------------------------------------------===//

#include "weft/exec/Checkpoint.h"
#include "weft/exec/Error.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

double seconds() {
  using Clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 3 || argc > 4) {
    std::fputs("usage: weft-checkpoint-bench DIR GIGABYTES [REPEATS]\n",
               stderr);
    return 2;
  }
  const char *rankText = std::getenv("OMPI_COMM_WORLD_RANK");
  int rank = rankText ? std::atoi(rankText) : 0;
  int64_t bytes = int64_t(std::atof(argv[2]) * 1e9);
  int repeats = argc == 4 ? std::atoi(argv[3]) : 3;
  std::string path =
      std::string(argv[1]) + "/rank-" + std::to_string(rank) + ".bin";
  // Both buffers are touched first, as the regions of a running Session are.
  std::vector<std::byte> state(static_cast<size_t>(bytes)),
      loaded(static_cast<size_t>(bytes));
  for (size_t i = 0; i < state.size(); ++i)
    state[i] = std::byte(i * 2654435761u >> 24);
  std::memset(loaded.data(), 0, loaded.size());

  weft::exec::RankFileInfo info;
  info.bundleHash = std::string(64, '0');
  info.rank = rank;
  info.payloadBytes = bytes;
  try {
    for (int r = 0; r < repeats; ++r) {
      double t0 = seconds();
      weft::exec::RankFileResult result =
          weft::exec::writeRankFile(path, info, state.data());
      double t1 = seconds();
      weft::exec::readRankFile(path, info, result, loaded.data());
      double t2 = seconds();
      // The file is fsynced, so its pages are clean: dropping them makes the
      // next load come from the disk (no root needed, unlike drop_caches).
      int fd = ::open(path.c_str(), O_RDONLY);
      if (fd < 0 || ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) != 0)
        throw weft::exec::Error(path + ": cannot drop its cached pages");
      ::close(fd);
      double t3 = seconds();
      weft::exec::readRankFile(path, info, result, loaded.data());
      double t4 = seconds();
      double crcStart = seconds();
      uint32_t crc = weft::exec::crc32c(state.data(), state.size());
      double crcS = seconds() - crcStart;
      if (crc != result.payloadCrc ||
          std::memcmp(state.data(), loaded.data(), state.size()) != 0)
        throw weft::exec::Error(path + ": loaded state differs");
      std::printf("rank %d: %.3f GB: save %.3f s (%.2f GB/s, with fsync), "
                  "load+verify %.3f s (%.2f GB/s, page cache; %.2f GB/s from "
                  "disk), crc32c alone %.2f GB/s\n",
                  rank, double(bytes) / 1e9, t1 - t0,
                  double(bytes) / 1e9 / (t1 - t0), t2 - t1,
                  double(bytes) / 1e9 / (t2 - t1),
                  double(bytes) / 1e9 / (t4 - t3), double(bytes) / 1e9 / crcS);
    }
  } catch (const weft::exec::Error &error) {
    std::fprintf(stderr, "weft-checkpoint-bench: error: %s\n", error.what());
    return 1;
  }
  ::unlink(path.c_str());
  return 0;
}
