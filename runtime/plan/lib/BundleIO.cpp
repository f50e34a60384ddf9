//===- BundleIO.cpp - Deterministic, atomic bundle files ------------------===//

#include "Canonical.h"

#include "weft/plan/Error.h"
#include "weft/plan/Serialize.h"
#include "weft/plan/Sha256.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

using namespace weft::plan;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const char *const kManifestName = "plan.json";

std::string systemError() { return std::strerror(errno); }

void fsyncPath(const std::string &path, int flags) {
  int fd = ::open(path.c_str(), flags);
  if (fd < 0)
    throw Error(path + ": cannot open for fsync: " + systemError());
  bool ok = ::fsync(fd) == 0;
  std::string reason = ok ? "" : systemError();
  ::close(fd);
  if (!ok)
    throw Error(path + ": fsync failed: " + reason);
}

} // namespace

void weft::plan::writeFileAtomic(const std::string &path,
                                 const std::string &contents) {
  std::string temp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw Error(temp + ": cannot create: " + systemError());
  const char *data = contents.data();
  size_t left = contents.size();
  while (left > 0) {
    ssize_t written = ::write(fd, data, left);
    if (written < 0 && errno == EINTR)
      continue;
    if (written <= 0) {
      std::string reason = systemError();
      ::close(fd);
      ::unlink(temp.c_str());
      throw Error(temp + ": write failed: " + reason);
    }
    data += written;
    left -= written;
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    std::string reason = systemError();
    ::unlink(temp.c_str());
    throw Error(temp + ": fsync failed: " + reason);
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    std::string reason = systemError();
    ::unlink(temp.c_str());
    throw Error(path + ": rename failed: " + reason);
  }
  fsyncPath(fs::path(path).parent_path().string(), O_RDONLY | O_DIRECTORY);
}

std::optional<std::string> weft::plan::readFile(const std::string &path) {
  // An ifstream opens a directory and reports a size near 2^63 for it.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    errno = EISDIR;
    return std::nullopt;
  }
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in)
    return std::nullopt;
  std::streamoff size = in.tellg();
  if (size < 0) { // not seekable: read it as a stream
    in.clear();
    in.seekg(0);
    std::ostringstream contents;
    contents << in.rdbuf();
    return contents.str();
  }
  std::string contents(size_t(size), '\0');
  in.seekg(0);
  if (!in.read(contents.data(), size))
    return std::nullopt;
  return contents;
}

namespace {

/// The side files listed in the manifest, read from `dir`.
std::map<std::string, std::string> readSideFiles(const json &manifest,
                                                 const std::string &dir,
                                                 const std::string &file) {
  std::map<std::string, std::string> files;
  auto list = manifest.find("files");
  if (list == manifest.end() || !list->is_array())
    return files; // fromJson reports the missing or malformed list
  for (size_t i = 0; i < list->size(); ++i) {
    const json &entry = (*list)[i];
    if (!entry.is_object() || !entry.contains("path") ||
        !entry["path"].is_string())
      continue; // likewise
    std::string path = entry["path"].get<std::string>();
    // Never read outside the bundle, even for a hostile manifest.
    if (path.empty() || path.front() == '/' ||
        path.find("..") != std::string::npos)
      throw Error(file + ": files[" + std::to_string(i) +
                  "].path: invalid side-file path '" + path + "'");
    std::optional<std::string> contents = readFile(dir + "/" + path);
    if (!contents)
      throw Error(file + ": files[" + std::to_string(i) +
                  "].path: cannot read '" + path + "'");
    files[path] = std::move(*contents);
  }
  return files;
}

/// nlohmann's error text without its "[json.exception.parse_error.101] " tag.
std::string parseErrorReason(const json::parse_error &error) {
  std::string what = error.what();
  size_t tagEnd = what.find("] ");
  return tagEnd == std::string::npos ? what : what.substr(tagEnd + 2);
}

} // namespace

std::string weft::plan::detail::finishContentHash(
    Sha256 &hasher, const std::map<std::string, std::string> &files) {
  for (const auto &[path, contents] : files) {
    hasher.update(path);
    hasher.update(std::string_view("\0", 1));
    char size[8];
    for (int i = 0; i < 8; ++i)
      size[i] = char(uint64_t(contents.size()) >> (8 * i));
    hasher.update(std::string_view(size, 8));
    hasher.update(contents);
  }
  return hasher.finishHex();
}

std::string
weft::plan::contentHash(const json &manifest,
                        const std::map<std::string, std::string> &files) {
  // The compact dump without content_hash, streamed into the hash: no copy
  // of the tree and no whole-manifest string.
  Sha256 hasher;
  detail::CanonicalWriter writer(-1, &hasher);
  writer.value(manifest, "content_hash");
  writer.take();
  return detail::finishContentHash(hasher, files);
}

void weft::plan::writeBundle(const Bundle &bundle, const std::string &dir) {
  std::string file = dir + "/" + kManifestName;
  std::vector<StructuralError> errors = checkStructure(bundle);
  if (!errors.empty())
    throw Error(file + ": " + errors.front().path + ": " +
                errors.front().reason + " (refusing to write)");
  // The manifest text is made before anything is written, so a string that
  // cannot be written (invalid UTF-8) leaves the directory untouched. The
  // compact form goes straight into the hash; the indented form is the file.
  std::vector<StoredProgram> stored = storedPrograms(bundle);
  std::string text;
  try {
    Sha256 hasher;
    detail::CanonicalWriter compact(-1, &hasher);
    detail::writeManifest(compact, bundle, stored, {});
    compact.take();
    std::string hash = detail::finishContentHash(hasher, bundle.files);
    detail::CanonicalWriter pretty(2);
    detail::writeManifest(pretty, bundle, stored, hash);
    text = pretty.take();
    text += '\n';
  } catch (const Error &error) {
    throw Error(file + ": " + error.what() + " (refusing to write)");
  }

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw Error(dir + ": cannot create directory: " + ec.message());

  for (const auto &[path, contents] : bundle.files) {
    std::string target = dir + "/" + path;
    fs::create_directories(fs::path(target).parent_path(), ec);
    if (ec)
      throw Error(target + ": cannot create directory: " + ec.message());
    writeFileAtomic(target, contents);
  }
  // The manifest goes last: a bundle whose plan.json is in place has all of
  // its side files, and the hash catches a crash between side-file renames.
  writeFileAtomic(file, text);
}

Bundle weft::plan::loadBundle(const std::string &dir,
                              std::string *verifiedHash) {
  std::string file = dir + "/" + kManifestName;
  std::optional<std::string> text = readFile(file);
  if (!text)
    throw Error(file + ": cannot read: " + systemError());
  json manifest;
  try {
    manifest = json::parse(*text);
  } catch (const json::parse_error &error) {
    throw Error(file + ": not valid JSON (truncated or corrupt?): " +
                parseErrorReason(error));
  }
  if (!manifest.is_object())
    throw Error(file + ": <root>: expected an object");

  // The version decides how to read everything else, so it comes first.
  auto version = manifest.find("format_version");
  if (version == manifest.end() || !version->is_number_integer())
    throw Error(file + ": format_version: missing or not an integer");
  if (version->get<int64_t>() != kFormatVersion)
    throw Error(file + ": format_version: " +
                unsupportedVersionReason(version->get<int64_t>()));

  auto recorded = manifest.find("content_hash");
  if (recorded == manifest.end() || !recorded->is_string())
    throw Error(file + ": content_hash: missing or not a string");
  std::map<std::string, std::string> files = readSideFiles(manifest, dir, file);
  std::string actual = contentHash(manifest, files);
  if (recorded->get<std::string>() != actual)
    throw Error(file + ": content_hash: mismatch (manifest says " +
                recorded->get<std::string>() + ", contents hash to " + actual +
                "); the bundle was edited or is corrupt");
  Bundle bundle = fromJson(manifest, files, file);
  if (verifiedHash)
    *verifiedHash = std::move(actual);
  return bundle;
}
