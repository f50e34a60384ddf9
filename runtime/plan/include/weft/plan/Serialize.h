//===- Serialize.h - Reading and writing plan bundles -----------*- C++ -*-===//
//
// A bundle is a directory: plan.json (the manifest) plus side files. Writing
// is deterministic (sorted keys, shortest round-trip floats) and atomic per
// file (temp name, fsync, rename; plan.json last). Loading checks the version,
// the content hash and every structural constraint, and throws Error with
// "<dir>/plan.json: <json path>: <reason>" on the first violation.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_PLAN_SERIALIZE_H
#define WEFT_PLAN_SERIALIZE_H

#include "weft/plan/Bundle.h"

#include <map>
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

/// The manifest without content_hash (the canonical form that is hashed).
nlohmann::json toJson(const Bundle &bundle);
/// Parse a manifest (content_hash, if present, is not checked here) with the
/// side files it lists, and check its structure; `file` prefixes errors.
Bundle fromJson(const nlohmann::json &manifest,
                const std::map<std::string, std::string> &files,
                const std::string &file);

/// SHA-256 (hex) over the compact dump of `manifest` (without content_hash)
/// followed by, for each side file in path order: the path, a NUL byte, the
/// size as 8 little-endian bytes, and the contents.
std::string contentHash(const nlohmann::json &manifest,
                        const std::map<std::string, std::string> &files);

/// Write `bundle` into directory `dir` (created if missing). Throws Error if
/// the bundle is structurally invalid or a file cannot be written.
void writeBundle(const Bundle &bundle, const std::string &dir);
/// Load and structurally check the bundle in `dir`.
Bundle loadBundle(const std::string &dir);

} // namespace weft::plan

#endif // WEFT_PLAN_SERIALIZE_H
