//===- KernelFatbins.cpp - Generated kernels compiled by nvcc -------------===//
#include "weft/Target/KernelFatbins.h"

#include "weft/kernels/KernelHeaderText.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/Threading.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
#include <deque>
#include <optional>

using namespace llvm;

namespace {

Error makeError(const Twine &message) {
  return createStringError(inconvertibleErrorCode(), message);
}

Error writeFile(StringRef path, StringRef text) {
  if (std::error_code ec =
          sys::fs::create_directories(sys::path::parent_path(path)))
    return makeError(path + ": " + ec.message());
  std::error_code ec;
  raw_fd_ostream out(path, ec);
  if (ec)
    return makeError(path + ": " + ec.message());
  out << text;
  out.close();
  if (out.has_error())
    return makeError(path + ": " + out.error().message());
  return Error::success();
}

/// The first line of nvcc's output that reports an error (else the first).
std::string firstError(StringRef log) {
  SmallVector<StringRef> lines;
  log.split(lines, '\n', -1, false);
  for (StringRef line : lines)
    if (line.contains("error"))
      return line.trim().str();
  return lines.empty() ? "no output" : lines.front().trim().str();
}

/// Removes a temporary directory tree when it goes out of scope.
struct TempDir {
  SmallString<128> path;
  ~TempDir() {
    if (!path.empty())
      sys::fs::remove_directories(path);
  }
};

} // namespace

Expected<std::vector<std::string>> weft::parseCudaArchs(StringRef text) {
  std::vector<std::string> archs;
  SmallVector<StringRef> entries;
  text.split(entries, ',', -1, true);
  for (StringRef entry : entries) {
    StringRef arch = entry.trim();
    StringRef number = arch;
    number.consume_front("sm_");
    StringRef suffix;
    if (number.ends_with("a") || number.ends_with("f")) {
      suffix = number.take_back(1);
      number = number.drop_back(1);
    }
    unsigned value = 0;
    if (number.empty() || number.getAsInteger(10, value) || value < 75)
      return makeError("--cuda-arch: '" + entry +
                       "' is not a CUDA architecture (sm_NN or NN, NN >= 75, "
                       "e.g. sm_90 or sm_80,sm_90)");
    std::string name = "sm_" + std::to_string(value) + suffix.str();
    if (llvm::find(archs, name) == archs.end())
      archs.push_back(name);
  }
  return archs;
}

Expected<std::string> weft::findNvcc(StringRef given) {
  if (!given.empty()) {
    if (!sys::fs::can_execute(given))
      return makeError("--nvcc: '" + given + "' is not an executable");
    return given.str();
  }
  for (const char *variable : {"CUDA_HOME", "CUDA_PATH"})
    if (std::optional<std::string> root = sys::Process::GetEnv(variable)) {
      SmallString<128> path(*root);
      sys::path::append(path, "bin", "nvcc");
      if (sys::fs::can_execute(path))
        return std::string(path);
    }
  if (ErrorOr<std::string> path = sys::findProgramByName("nvcc"))
    return *path;
  if (sys::fs::can_execute("/usr/local/cuda/bin/nvcc"))
    return std::string("/usr/local/cuda/bin/nvcc");
  return makeError("--cuda-arch: nvcc not found (give --nvcc PATH, or set "
                   "CUDA_HOME, or put nvcc on PATH)");
}

Error weft::addKernelFatbins(plan::Bundle &bundle,
                             const KernelFatbinOptions &options) {
  if (options.archs.empty())
    return Error::success();
  Expected<std::string> nvcc = findNvcc(options.nvcc);
  if (!nvcc)
    return nvcc.takeError();

  TempDir temp;
  if (std::error_code ec =
          sys::fs::createUniqueDirectory("weftc-kernels", temp.path))
    return makeError("--cuda-arch: cannot create a temporary directory: " +
                     ec.message());
  SmallString<128> include(temp.path);
  sys::path::append(include, "include");
  for (const weft::kernels::EmbeddedHeader &header :
       weft::kernels::kernelHeaders()) {
    SmallString<128> path(include);
    sys::path::append(path, header.path);
    if (Error error = writeFile(path, header.text))
      return error;
  }

  struct Job {
    std::string source; // bundle path, "kernels/x.cu"
    SmallString<128> input, output, log;
    sys::ProcessInfo process;
  };
  std::deque<Job> jobs;
  for (const plan::Kernel &kernel : bundle.kernels) {
    if (llvm::any_of(
            jobs, [&](const Job &job) { return job.source == kernel.source; }))
      continue;
    auto file = bundle.files.find(kernel.source);
    if (file == bundle.files.end())
      return makeError(kernel.source + ": no such side file");
    Job &job = jobs.emplace_back();
    job.source = kernel.source;
    // The source's own name keeps nvcc's diagnostics readable.
    std::string stem = std::to_string(jobs.size()) + "/" +
                       sys::path::filename(kernel.source).str();
    job.input = temp.path;
    sys::path::append(job.input, "src", stem);
    job.output = job.input;
    sys::path::replace_extension(job.output, "fatbin");
    job.log = job.input;
    sys::path::replace_extension(job.log, "log");
    if (Error error = writeFile(job.input, file->second))
      return error;
  }

  std::vector<std::string> args = {*nvcc, "-fatbin", "-std=c++17",
                                   "-I" + std::string(include)};
  for (size_t i = 0; i < options.archs.size(); ++i) {
    StringRef real = options.archs[i];
    std::string virt = "compute_" + real.drop_front(3).str();
    std::string code = real.str();
    if (i + 1 == options.archs.size())
      code = "[" + code + "," + virt + "]";
    args.push_back("-gencode=arch=" + virt + ",code=" + code);
  }

  unsigned width = options.jobs
                       ? options.jobs
                       : llvm::hardware_concurrency().compute_thread_count();
  std::vector<Job *> running;
  std::optional<std::string> failure;
  auto finish = [&](Job &job) {
    std::string message;
    sys::ProcessInfo done = sys::Wait(job.process, std::nullopt, &message);
    if (failure)
      return;
    if (done.ReturnCode == 0 && message.empty())
      return;
    std::string log;
    if (auto buffer = MemoryBuffer::getFile(job.log))
      log = (*buffer)->getBuffer().str();
    failure = job.source + ": nvcc failed (exit " +
              std::to_string(done.ReturnCode) +
              "): " + (message.empty() ? firstError(log) : message);
  };
  for (Job &job : jobs) {
    if (running.size() >= width) {
      finish(*running.front());
      running.erase(running.begin());
    }
    if (failure)
      break;
    std::vector<StringRef> argv(args.begin(), args.end());
    argv.push_back("-o");
    argv.push_back(job.output);
    argv.push_back(job.input);
    std::optional<StringRef> redirects[] = {StringRef(""), job.log.str(),
                                            job.log.str()};
    std::string message;
    bool failed = false;
    job.process = sys::ExecuteNoWait(*nvcc, argv, std::nullopt, redirects, 0,
                                     &message, &failed);
    if (failed) {
      failure = job.source + ": cannot run " + *nvcc + ": " + message;
      break;
    }
    running.push_back(&job);
  }
  for (Job *job : running)
    finish(*job);
  if (failure)
    return makeError("--cuda-arch: " + *failure);

  for (Job &job : jobs) {
    auto buffer = MemoryBuffer::getFile(job.output, /*IsText=*/false,
                                        /*RequiresNullTerminator=*/false);
    if (!buffer || (*buffer)->getBufferSize() == 0)
      return makeError("--cuda-arch: " + job.source + ": nvcc wrote no fatbin");
    bundle.files[plan::kernelFatbinPath(job.source)] =
        (*buffer)->getBuffer().str();
  }
  return Error::success();
}
