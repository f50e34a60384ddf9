//===- Serialize.h - Reading and writing plan bundles -----------*- C++ -*-===//
//
// A bundle is a directory: plan.json (the manifest) plus side files. Writing
// is deterministic (sorted keys, shortest round-trip floats) and atomic per
// file (temp name, fsync, rename; plan.json last). Loading checks the version,
// the content hash and every structural constraint, and throws Error with
// "<dir>/plan.json: <json path>: <reason>" on the first violation. On disk,
// roles with alike programs share one stored program (format version 3); the
// in-memory Bundle always has one Program per role.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_PLAN_SERIALIZE_H
#define WEFT_PLAN_SERIALIZE_H

#include "weft/plan/Bundle.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace weft::plan {

/// A structural violation: the JSON path of the offending field and why.
struct StructuralError {
  std::string path; // e.g. "programs[1].streams[0].instructions[17].group"
  std::string reason;
};

/// Check every structural constraint (ids in range, sizes positive, offsets
/// aligned, operand shapes per opcode, references valid, role table covers
/// the world). Returns all violations in manifest order.
std::vector<StructuralError> checkStructure(const Bundle &bundle);

/// How the manifest stores the programs (format version 3): roles whose
/// programs have equal buffers, num_events, region sizes, stream names,
/// instruction counts per stream and opcodes at every position share one
/// stored program, grouped in role order; an instruction that differs between
/// them is stored per role.
struct StoredProgram {
  std::vector<int64_t> roles; // ascending role ids
  /// perRole[s][i]: instruction i of stream s differs between the roles.
  std::vector<std::vector<bool>> perRole;
};
std::vector<StoredProgram> storedPrograms(const Bundle &bundle);

/// The manifest without content_hash (the canonical form that is hashed).
nlohmann::json toJson(const Bundle &bundle);
/// Exactly `toJson(bundle).dump(indent)` (indent -1: compact), with
/// content_hash added when `contentHash` is not empty, written straight from
/// the bundle without building a JSON tree. Throws Error on a string that is
/// not valid UTF-8.
std::string manifestText(const Bundle &bundle, int indent = -1,
                         const std::string &contentHash = "");
/// Parse a manifest (content_hash, if present, is not checked here) with the
/// side files it lists, expanding its stored programs to one program per
/// role, and check its structure; `file` prefixes errors, whose paths are
/// paths into the manifest (e.g. "programs[1].streams[0].instructions[17].
/// per_role[2].group" for the third role of the second stored program).
Bundle fromJson(const nlohmann::json &manifest,
                const std::map<std::string, std::string> &files,
                const std::string &file);

/// SHA-256 (hex) over the compact dump of `manifest` (without content_hash)
/// followed by, for each side file in path order: the path, a NUL byte, the
/// size as 8 little-endian bytes, and the contents.
std::string contentHash(const nlohmann::json &manifest,
                        const std::map<std::string, std::string> &files);
/// contentHash(toJson(bundle), bundle.files) without building the tree.
std::string contentHash(const Bundle &bundle);

/// Writes `contents` to a temporary name beside `path`, fsyncs it, renames it
/// over `path` and fsyncs the directory: readers see the old file or the new
/// one, never a prefix. Throws Error naming the file and the reason.
void writeFileAtomic(const std::string &path, const std::string &contents);
/// The bytes of file `path`, or nullopt when it cannot be read.
std::optional<std::string> readFile(const std::string &path);

/// Write `bundle` into directory `dir` (created if missing). Throws Error if
/// the bundle is structurally invalid or a file cannot be written.
void writeBundle(const Bundle &bundle, const std::string &dir);
/// Load and structurally check the bundle in `dir`. `contentHash`, when
/// given, receives the content hash just verified (the identity checkpoints
/// record), so callers need not hash the bundle again.
Bundle loadBundle(const std::string &dir, std::string *contentHash = nullptr);

} // namespace weft::plan

#endif // WEFT_PLAN_SERIALIZE_H
