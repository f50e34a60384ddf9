//===- BenchRuntime.cpp - Replay overhead, offload and checkpoint I/O -----===//
//
//   weft-bench-runtime replay [N]               ns per replayed instruction
//   weft-bench-runtime offload GB [REPEATS]     offload/reload GB/s per group
//   weft-bench-runtime checkpoint DIR GB [REPEATS]
//                                  full vs weights-only save, load, raw write
//
// One rank (MPI world size 1). GB is the synthetic training state: a
// mixed-precision AdamW layout of 16 bytes per parameter (bf16 weights 2,
// fp32 master 4, two fp32 moments 8, bf16 gradients 2). Every figure is
// printed next to a baseline measured in the same run (memcpy bandwidth,
// raw pwrite+fsync bandwidth, a direct 4-byte store). docs/benchmarks.md
// records the results.
//
//===----------------------------------------------------------------------===//

#include "weft/exec/Error.h"
#include "weft/exec/Runtime.h"
#include "weft/plan/Serialize.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <string>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

using namespace weft;
using exec::HostMemoryKind;
using exec::StateGroup;

namespace {

double seconds() {
  using Clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

std::string scratchDir(const std::string &name) {
  std::string dir = std::filesystem::temp_directory_path().string() +
                    "/weft-bench-" + std::to_string(::getpid()) + "-" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

/// A one-rank bundle with no data and no collectives.
plan::Bundle emptyBundle() {
  plan::Bundle bundle;
  bundle.model = {"bench", "bench"};
  bundle.mesh = {1, 1, 1};
  plan::TrainingInfo &t = bundle.training;
  t.globalBatch = 1;
  t.seqLen = 16;
  t.precision = "bf16";
  t.microBatch = 1;
  t.gradAccum = 1;
  t.lr = 1e-3;
  t.minLr = 1e-4;
  t.warmupSteps = 1;
  t.decaySteps = 10;
  bundle.prediction = {0.1, {0}, 0.1};
  bundle.rankRoles = {0};
  return bundle;
}

int64_t addBuffer(plan::Program &program, const std::string &name,
                  plan::Region region, int64_t bytes, plan::DType dtype,
                  int64_t &end) {
  plan::Buffer b;
  b.id = int64_t(program.buffers.size());
  b.name = name;
  b.region = region;
  b.size = bytes;
  b.dtype = dtype;
  b.alignment = 4096;
  b.offset = (end + 4095) / 4096 * 4096;
  end = b.offset + b.size;
  program.buffers.push_back(b);
  return b.id;
}

std::unique_ptr<exec::Runtime>
openBundle(plan::Bundle bundle, const std::string &name, bool verify = true) {
  std::string dir = scratchDir(name);
  plan::writeBundle(bundle, dir + "/bundle");
  exec::Options options;
  options.verifyPlan = verify;
  return exec::Runtime::open(dir + "/bundle", options);
}

//===----------------------------------------------------------------------===//
// replay
//===----------------------------------------------------------------------===//

void fillInst(std::vector<plan::Instruction> &stream, int64_t buffer,
              double value) {
  plan::Instruction inst;
  inst.opcode = plan::Opcode::Fill;
  inst.writes = {{buffer, 0, 4}};
  inst.value = value;
  inst.dtype = plan::DType::F32;
  stream.push_back(inst);
}

void eventInst(std::vector<plan::Instruction> &stream, plan::Opcode opcode,
               int64_t event) {
  plan::Instruction inst;
  inst.opcode = opcode;
  inst.event = event;
  stream.push_back(inst);
}

/// Seconds per step of `bundle`'s program (best of `steps`).
double bestStep(exec::Runtime &rt, int steps) {
  double best = 1e30;
  for (int i = 0; i < steps; ++i)
    best = std::min(best, rt.step().stepTimeS);
  return best;
}

int replay(int64_t n) {
  // Empty program: the per-step fixed cost (statistics all-reduce).
  plan::Bundle empty = emptyBundle();
  {
    plan::Program p;
    int64_t persistentEnd = 0;
    addBuffer(p, "x", plan::Region::Persistent, 64, plan::DType::F32,
              persistentEnd);
    p.persistentBytes = 4096;
    p.arenaBytes = 4096;
    p.streams.push_back({"compute", {}});
    empty.programs = {p};
  }
  double emptyStep = bestStep(*openBundle(empty, "empty"), 50);

  // 1 stream of n fills of one f32 (4 bytes): scheduler + backend dispatch.
  plan::Bundle fills = emptyBundle();
  {
    plan::Program p;
    int64_t end = 0;
    int64_t x =
        addBuffer(p, "x", plan::Region::Persistent, 64, plan::DType::F32, end);
    p.persistentBytes = 4096;
    p.arenaBytes = 4096;
    p.streams.push_back({"compute", {}});
    for (int64_t i = 0; i < n; ++i)
      fillInst(p.streams[0].instructions, x, double(i % 7));
    fills.programs = {p};
  }
  double t0 = seconds();
  auto fillRt = openBundle(fills, "fills");
  double openFills = seconds() - t0;
  double fillStep = bestStep(*fillRt, 5);

  // 2 streams in lock-step: a fills and records, b waits, fills, records,
  // a waits: every instruction but one makes the scheduler switch streams.
  plan::Bundle pingPong = emptyBundle();
  int64_t rounds = n / 6;
  {
    plan::Program p;
    int64_t end = 0;
    int64_t x =
        addBuffer(p, "x", plan::Region::Persistent, 64, plan::DType::F32, end);
    int64_t y =
        addBuffer(p, "y", plan::Region::Persistent, 64, plan::DType::F32, end);
    p.persistentBytes = end;
    p.arenaBytes = 4096;
    p.streams.push_back({"a", {}});
    p.streams.push_back({"b", {}});
    auto &a = p.streams[0].instructions, &b = p.streams[1].instructions;
    for (int64_t r = 0; r < rounds; ++r) {
      fillInst(a, x, 1);
      eventInst(a, plan::Opcode::RecordEvent, 2 * r);
      eventInst(b, plan::Opcode::WaitEvent, 2 * r);
      fillInst(b, y, 2);
      eventInst(b, plan::Opcode::RecordEvent, 2 * r + 1);
      eventInst(a, plan::Opcode::WaitEvent, 2 * r + 1);
    }
    p.numEvents = 2 * rounds;
    pingPong.programs = {p};
  }
  double pingStep = bestStep(*openBundle(pingPong, "pingpong"), 5);

  // Baseline: the same 4-byte stores through a function pointer.
  std::vector<float> target(16);
  void (*volatile store)(float *, float) = [](float *p, float v) { *p = v; };
  double b0 = seconds();
  for (int64_t i = 0; i < n; ++i)
    store(target.data(), float(i % 7));
  double direct = (seconds() - b0) / double(n);

  std::printf("replay: %lld instructions per step, world size 1\n",
              (long long)n);
  std::printf("  empty step (statistics all-reduce): %.2f us\n",
              emptyStep * 1e6);
  std::printf("  fill 4 bytes x %lld, 1 stream:         %.1f ns per "
              "instruction (open + verify %.2f s)\n",
              (long long)n, (fillStep - emptyStep) / double(n) * 1e9,
              openFills);
  std::printf("  fill/record/wait ping-pong, 2 streams: %.1f ns per "
              "instruction (%lld instructions)\n",
              (pingStep - emptyStep) / double(6 * rounds) * 1e9,
              (long long)(6 * rounds));
  std::printf("  baseline: 4-byte store via a function pointer: %.1f ns\n",
              direct * 1e9);
  return 0;
}

//===----------------------------------------------------------------------===//
// The synthetic training state
//===----------------------------------------------------------------------===//

/// 16 bytes per parameter: bf16 weights (2), fp32 master (4), exp_avg and
/// exp_avg_sq (8), bf16 gradients (2); and an arena of `arenaBytes`.
plan::Bundle stateBundle(int64_t params, int64_t arenaBytes) {
  plan::Bundle bundle = emptyBundle();
  plan::Program p;
  int64_t end = 0, arenaEnd = 0;
  using plan::DType;
  using plan::Region;
  int64_t master =
      addBuffer(p, "master", Region::Persistent, 4 * params, DType::F32, end);
  int64_t grad =
      addBuffer(p, "grads", Region::Persistent, 2 * params, DType::BF16, end);
  int64_t m =
      addBuffer(p, "exp_avg", Region::Persistent, 4 * params, DType::F32, end);
  int64_t v = addBuffer(p, "exp_avg_sq", Region::Persistent, 4 * params,
                        DType::F32, end);
  int64_t weights =
      addBuffer(p, "params", Region::Persistent, 2 * params, DType::BF16, end);
  int64_t act =
      addBuffer(p, "act", Region::Arena, arenaBytes, DType::BF16, arenaEnd);
  p.persistentBytes = end;
  p.arenaBytes = arenaEnd;
  plan::Instruction fill;
  fill.opcode = plan::Opcode::Fill;
  fill.writes = {{act, 0, arenaBytes}};
  fill.dtype = DType::BF16;
  plan::Instruction step;
  step.opcode = plan::Opcode::OptimizerStep;
  step.reads = {{master, 0, 4 * params},
                {grad, 0, 2 * params},
                {m, 0, 4 * params},
                {v, 0, 4 * params}};
  step.writes = {
      step.reads[0], step.reads[2], step.reads[3], {weights, 0, 2 * params}};
  step.count = params;
  step.dtype = DType::F32;
  p.streams.push_back({"compute", {fill, step}});
  bundle.programs = {p};
  return bundle;
}

/// Writes a pattern into every persistent byte (so every page is resident
/// and no copy reads the kernel's zero page).
void touchState(exec::Runtime &rt) {
  const plan::Program &program = *rt.session().rankProgram().program;
  for (const plan::Buffer &b : program.buffers)
    if (b.region == plan::Region::Persistent) {
      exec::Operand op = rt.session().buffer(b.id);
      for (int64_t i = 0; i < op.bytes; i += 8) {
        uint64_t word = uint64_t(i) * 0x9e3779b97f4a7c15ull;
        std::memcpy(op.data + i, &word,
                    size_t(std::min<int64_t>(8, op.bytes - i)));
      }
    }
}

double gbps(int64_t bytes, double s) { return double(bytes) / 1e9 / s; }

int offload(double gb, int repeats) {
  int64_t params = int64_t(gb * 1e9 / 16);
  int64_t arena = params; // activations: 1 byte per parameter
  auto rt = openBundle(stateBundle(params, arena), "offload", false);
  touchState(*rt);
  // Baseline: memcpy of the largest group's size between two touched
  // buffers (what an offload copy cannot beat on this machine).
  int64_t baseBytes = 4 * params;
  std::vector<char> a(size_t(baseBytes), 1), b(size_t(baseBytes), 2);
  double best = 1e30;
  for (int r = 0; r < 3; ++r) {
    double t0 = seconds();
    std::memcpy(b.data(), a.data(), a.size());
    best = std::min(best, seconds() - t0);
  }
  double memcpyGbps = gbps(baseBytes, best);
  // Second baseline: memcpy into memory the OS has to map first (what a
  // reload into released pages costs at least).
  double fresh = 1e30;
  for (int r = 0; r < 3; ++r) {
    void *target = ::mmap(nullptr, size_t(baseBytes), PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (target == MAP_FAILED)
      throw exec::Error("mmap failed");
    double t0 = seconds();
    std::memcpy(target, a.data(), a.size());
    fresh = std::min(fresh, seconds() - t0);
    ::munmap(target, size_t(baseBytes));
  }
  double freshGbps = gbps(baseBytes, fresh);
  std::vector<char>().swap(a);
  std::vector<char>().swap(b);
  std::printf("offload: %.2f GB state (%lld parameters x 16 B) + %.2f GB "
              "arena; baselines: memcpy %.2f GB/s, memcpy into unmapped "
              "pages %.2f GB/s\n",
              double(params) * 16 / 1e9, (long long)params, double(arena) / 1e9,
              memcpyGbps, freshGbps);
  for (HostMemoryKind kind : {HostMemoryKind::Pageable, HostMemoryKind::Pinned})
    for (int r = 0; r < repeats; ++r) {
      std::printf("  %s, run %d:\n", std::string(toString(kind)).c_str(),
                  r + 1);
      for (StateGroup group : exec::allStateGroups()) {
        if (rt->layout(group).bytes == 0)
          continue;
        exec::OffloadReport out, back;
        try {
          out = rt->offload(group, kind);
        } catch (const exec::Error &error) {
          std::printf("    %-16s offload failed: %s\n",
                      std::string(toString(group)).c_str(), error.what());
          continue;
        }
        back = rt->reload(group);
        if (out.bytesMoved == 0) { // the arena: released, not copied
          std::printf("    %-16s %6.3f GB  released in %6.3f s, back in "
                      "%6.3f s (NaN-filled)  device %.2f -> %.2f GB\n",
                      std::string(toString(group)).c_str(),
                      double(out.groupBytes) / 1e9, out.seconds, back.seconds,
                      double(out.deviceBytesBefore) / 1e9,
                      double(out.deviceBytesAfter) / 1e9);
          continue;
        }
        std::printf("    %-16s %6.3f GB  offload %6.3f s (%5.2f GB/s; copy "
                    "%.2fx memcpy, %s host buffer)  reload %6.3f s (%5.2f "
                    "GB/s; copy %.2fx memcpy)  device %.2f -> %.2f GB\n",
                    std::string(toString(group)).c_str(),
                    double(out.groupBytes) / 1e9, out.seconds,
                    gbps(out.bytesMoved, out.seconds),
                    gbps(out.bytesMoved, out.copySeconds) / memcpyGbps,
                    out.hostReused ? "reused" : "new", back.seconds,
                    gbps(back.bytesMoved, back.seconds),
                    gbps(back.bytesMoved, back.copySeconds) / memcpyGbps,
                    double(out.deviceBytesBefore) / 1e9,
                    double(out.deviceBytesAfter) / 1e9);
      }
    }
  // Everything at once, as weft-run --offload-between-steps all does: the
  // first round allocates the host buffers, the next ones reuse them.
  auto all = exec::allStateGroups();
  std::vector<StateGroup> groups(all.begin(), all.end());
  rt->releaseHostBuffers();
  for (int round = 1; round <= 3; ++round) {
    double t0 = seconds();
    std::vector<exec::OffloadReport> out =
        rt->offload(groups, HostMemoryKind::Pinned);
    double t1 = seconds();
    rt->reload(groups);
    double t2 = seconds();
    int64_t moved = 0;
    for (const exec::OffloadReport &r : out)
      moved += r.bytesMoved;
    std::printf("  all groups, pinned, round %d: %.3f GB moved, offload %.3f s "
                "(%.2f GB/s, %.2fx memcpy), reload %.3f s (%.2f GB/s), device "
                "%.2f -> %.2f GB\n",
                round, double(moved) / 1e9, t1 - t0, gbps(moved, t1 - t0),
                gbps(moved, t1 - t0) / memcpyGbps, t2 - t1,
                gbps(moved, t2 - t1),
                double(out.front().deviceBytesBefore) / 1e9,
                double(out.back().deviceBytesAfter) / 1e9);
  }
  return 0;
}

//===----------------------------------------------------------------------===//
// checkpoint
//===----------------------------------------------------------------------===//

/// Raw write bandwidth: the same bytes with pwrite in 8 MiB chunks + fsync,
/// no checksum, no header (what the checkpoint format costs on top).
double rawWrite(const std::string &path, const std::byte *data, int64_t bytes) {
  double t0 = seconds();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    throw exec::Error(path + ": cannot create");
  const int64_t chunk = int64_t(8) << 20;
  for (int64_t done = 0; done < bytes;) {
    ssize_t n = ::pwrite(fd, data + done, size_t(std::min(chunk, bytes - done)),
                         off_t(done));
    if (n <= 0) {
      ::close(fd);
      throw exec::Error(path + ": write failed");
    }
    done += n;
  }
  ::fsync(fd);
  ::close(fd);
  return seconds() - t0;
}

void dropCache(const std::string &dir) {
  for (const auto &entry : std::filesystem::recursive_directory_iterator(dir))
    if (entry.is_regular_file()) {
      int fd = ::open(entry.path().c_str(), O_RDONLY);
      if (fd >= 0) {
        ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        ::close(fd);
      }
    }
}

int checkpoint(const std::string &root, double gb, int repeats) {
  int64_t params = int64_t(gb * 1e9 / 16);
  auto rt = openBundle(stateBundle(params, 4096), "checkpoint", false);
  touchState(*rt);
  const plan::Program &program = *rt->session().rankProgram().program;
  std::string dir = root + "/weft-bench-checkpoint";
  std::filesystem::remove_all(dir);
  std::printf("checkpoint: %.2f GB state (%lld parameters), weights-only "
              "%.2f GB, into %s\n",
              double(program.persistentBytes) / 1e9, (long long)params,
              double(rt->layout(StateGroup::Params).bytes) / 1e9, dir.c_str());
  for (int r = 0; r < repeats; ++r) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    // Each measurement starts with the disk idle (no writeback of the
    // previous one pending), so fsyncs time only their own bytes.
    ::sync();
    // Buffer 0 ('master') sits at offset 0: its address is the region's.
    const std::byte *region = rt->session().buffer(0).data;
    double raw1 = rawWrite(dir + "/raw1.bin", region, program.persistentBytes);
    ::sync();
    exec::CheckpointStats full = rt->saveCheckpoint(dir);
    ::sync();
    exec::CheckpointStats weights = rt->saveWeights(dir);
    ::sync();
    double raw2 = rawWrite(dir + "/raw2.bin", region, program.persistentBytes);
    ::sync();
    exec::CheckpointStats cached = rt->loadCheckpoint(full.dir);
    dropCache(dir);
    exec::CheckpointStats disk = rt->loadCheckpoint(full.dir);
    double raw = gbps(2 * program.persistentBytes, raw1 + raw2);
    std::printf("  run %d: raw pwrite+fsync %.2f GB/s (before %.2f, after "
                "%.2f) | full save %.2f s (%.2f GB/s, %.2fx raw) | weights "
                "save %.2f s (%.2f GB/s, %.1fx faster than full) | load+verify "
                "%.2f s (%.2f GB/s page cache), %.2f s (%.2f GB/s disk)\n",
                r + 1, raw, gbps(program.persistentBytes, raw1),
                gbps(program.persistentBytes, raw2), full.seconds,
                gbps(full.bytes, full.seconds),
                gbps(full.bytes, full.seconds) / raw, weights.seconds,
                gbps(weights.bytes, weights.seconds),
                full.seconds / weights.seconds, cached.seconds,
                gbps(cached.bytes, cached.seconds), disk.seconds,
                gbps(disk.bytes, disk.seconds));
    std::filesystem::remove_all(dir);
  }
  std::filesystem::remove_all(dir);
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  std::vector<std::string> args(argv + 1, argv + argc);
  int status = 2;
  try {
    if (!args.empty() && args[0] == "replay" && args.size() <= 2)
      status = replay(args.size() == 2 ? std::stoll(args[1]) : 200000);
    else if (!args.empty() && args[0] == "offload" && args.size() >= 2 &&
             args.size() <= 3)
      status = offload(std::stod(args[1]),
                       args.size() == 3 ? std::stoi(args[2]) : 2);
    else if (!args.empty() && args[0] == "checkpoint" && args.size() >= 3 &&
             args.size() <= 4)
      status = checkpoint(args[1], std::stod(args[2]),
                          args.size() == 4 ? std::stoi(args[3]) : 2);
    else
      std::fputs("usage: weft-bench-runtime replay [N] | offload GB [REPEATS] "
                 "| checkpoint DIR GB [REPEATS]\n",
                 stderr);
  } catch (const std::exception &error) {
    std::fprintf(stderr, "weft-bench-runtime: error: %s\n", error.what());
    status = 1;
  }
  MPI_Finalize();
  return status;
}
