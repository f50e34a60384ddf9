//===- StateGroups.h - A rank's state, grouped for offload ------*- C++ -*-===//
//
// The runtime offloads, reloads and reports a rank's memory by *state group*:
// the working (low-precision) parameters, the fp32 master parameters, the
// optimizer states, the gradients, the activations workspace (the arena) and
// everything else persistent (loss, norms). The plan format has no per-buffer
// category yet, so classifyStateGroups() derives the group of every buffer
// from what the program does with it (docs/runtime.md, "State groups");
// analyzeBuffers() is the only place those rules live. This library depends
// on WeftPlan only, so weft-inspect shows the same groups without linking MPI.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_EXEC_STATEGROUPS_H
#define WEFT_EXEC_STATEGROUPS_H

#include "weft/plan/Bundle.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace weft::exec {

enum class StateGroup {
  Params,          // the weights the model computes with (working copy)
  MasterParams,    // fp32 master weights, when distinct from the working copy
  OptimizerStates, // AdamW exp_avg and exp_avg_sq
  Gradients,       // parameter gradients (and their reduction inputs)
  Activations,     // the arena: activations and workspace, dead between steps
  Other,           // any other persistent byte (loss, grad-norm scalar)
};
inline constexpr int kNumStateGroups = 6;

/// Every group, in the order above.
std::array<StateGroup, kNumStateGroups> allStateGroups();
/// "params", "master_params", "optimizer_states", "gradients",
/// "activations", "other".
std::string_view toString(StateGroup group);
std::optional<StateGroup> parseStateGroup(std::string_view text);
/// "all" or a comma-separated list of group names (no duplicates). Throws
/// Error naming the bad entry.
std::vector<StateGroup> parseStateGroupList(std::string_view text);

/// What the program does with one buffer: the one analysis behind both the
/// runtime's state groups (classifyStateGroups) and weft-inspect's buffer
/// categories (weft::inspect::classifyBuffers), which only map these facts.
struct BufferFacts {
  bool arena = false;          // region is the arena
  bool optimizerState = false; // optimizer_step reads[2] / reads[3]
  /// The parameter an optimizer_step updates (reads[0]) when a separate
  /// working copy exists (the step also writes writes[3], or an all_gather
  /// reads the buffer: ZeRO gathers the shard).
  bool masterParams = false;
  /// Holds working parameters: the optimizer_step parameter without a
  /// separate copy, optimizer_step writes[3], a buffer a parameter ShardSpec
  /// of the role names, or (transitively) the output of an all_gather whose
  /// input holds parameters (params or master, not optimizer state).
  bool params = false;
  bool gathered = false; // written by an all_gather whose input holds params
  /// Holds parameter gradients: optimizer_step reads[1], every range
  /// grad_norm reads and clip writes, and (transitively) the input of an
  /// all_reduce, reduce_scatter or copy whose output holds gradients.
  bool gradients = false;
  /// Written by an instruction other than copy, fill, all_reduce or
  /// reduce_scatter (e.g. the backward's compute).
  bool computed = false;
  /// Exactly one instruction touches it (release aside), and it both reads
  /// and writes it: scratch within an instruction.
  bool scratch = false;
};

/// The facts of every buffer of `program` (indexed by buffer id).
std::vector<BufferFacts> analyzeBuffers(const plan::Bundle &bundle,
                                        const plan::Program &program);

/// The state group of a buffer with these facts (the mapping below).
StateGroup stateGroupOf(const BufferFacts &facts);

/// The state group of every buffer of `program` (indexed by buffer id),
/// mapped from analyzeBuffers():
///  1. arena buffers are Activations;
///  2. persistent buffers an optimizer_step reads as exp_avg/exp_avg_sq
///     (reads[2], reads[3]) are OptimizerStates;
///  3. the parameter an optimizer_step updates (writes[0]) is MasterParams
///     when a separate working copy exists (the step also writes writes[3],
///     or an all_gather reads the buffer: ZeRO gathers the shard), else
///     Params (it is the working copy);
///  4. Params also: optimizer_step writes[3], persistent outputs of an
///     all_gather whose input is a parameter buffer, and any other buffer a
///     parameter ShardSpec of this role names;
///  5. Gradients: optimizer_step reads[1], every range grad_norm reads and
///     clip writes, and (transitively) the input of an all_reduce,
///     reduce_scatter or copy whose output is a gradient buffer;
///  6. any other persistent buffer is Other.
/// A rule earlier in the list wins.
std::vector<StateGroup> classifyStateGroups(const plan::Bundle &bundle,
                                            const plan::Program &program);

/// [offset, offset + bytes) of a region.
struct ByteRange {
  int64_t offset = 0;
  int64_t bytes = 0;
};

/// Where one group of one program lives: its device ranges in `region`
/// (persistent, or the arena for Activations) and, kept apart, its ranges in
/// the host region (optimizer-offload plans), which are already in host
/// memory: offload never moves them.
struct StateGroupLayout {
  StateGroup group = StateGroup::Other;
  plan::Region region = plan::Region::Persistent;
  std::vector<int64_t> buffers;      // buffer ids, ascending (both regions)
  std::vector<ByteRange> ranges;     // in `region`: coalesced, sorted by offset
  int64_t bytes = 0;                 // sum of the ranges
  std::vector<ByteRange> hostRanges; // in the host region, likewise
  int64_t hostBytes = 0;             // sum of the host ranges
};

/// The layout of every group of `program` (indexed by StateGroup). The
/// Activations group is the whole arena, [0, arena_bytes).
std::array<StateGroupLayout, kNumStateGroups>
stateGroupLayout(const plan::Bundle &bundle, const plan::Program &program);

/// What a weights snapshot of `program` holds: the persistent buffers from
/// which every working parameter follows, current after a step. That is the
/// Params group without the replicas ZeRO all-gathers from shards, plus the
/// shards they are gathered from (the low-precision `params.shard`, or the
/// fp32 master of an fp32 plan): ZeRO-1/2 rebuild the replicas only at the
/// start of the next step, so between steps they hold the previous step's
/// weights; and each DP rank then writes only its shard. `group` is Params.
/// Buffers in the host region go to hostRanges (a snapshot's payload is
/// `ranges` then `hostRanges`), except a host buffer whose bytes a copy
/// moves into a selected device buffer (optimizer offload's `params.host`):
/// the device copy already holds them.
StateGroupLayout weightsSnapshotLayout(const plan::Bundle &bundle,
                                       const plan::Program &program);

/// By rank, the rank whose weights-snapshot file holds that rank's
/// snapshot: the rank itself, unless no parameter shard in its snapshot's
/// buffers is split over DP (ZeRO-0: every DP replica holds the same
/// weights), in which case the replica of the same pipeline stage and TP
/// rank at DP index 0, if it runs the same program. Only that replica
/// writes the file. Analyzes each role's program once.
std::vector<int64_t> weightsSnapshotWriters(const plan::Bundle &bundle);

} // namespace weft::exec

#endif // WEFT_EXEC_STATEGROUPS_H
