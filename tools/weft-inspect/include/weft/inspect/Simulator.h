//===- Simulator.h - Discrete-event simulation of a plan's step -*- C++ -*-===//
//
// Every stream of every rank runs its instructions in order; a wait_event
// starts no earlier than its record_event, a collective starts when the last
// member arrives and ends together for all members, a send/recv pair is a
// rendezvous. Instruction durations come from the planner's cost model
// (docs/inspect.md, "Cost model"); transfers crossing the same link of a rank
// at once share its bandwidth (docs/inspect.md, "Links").
//
// Ranks of one role run the same program and arrive at every collective
// together with their own group of the family it names (the DP replicas of a
// stage each in their own pipeline, say): the simulation runs once per role,
// for the role's first rank, so its cost does not grow with DP. A collective
// meets the roles of that rank's group; this is exact when every group of a
// family that holds a rank of a role holds the same roles, as in plans laid
// out over the mesh.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_INSPECT_SIMULATOR_H
#define WEFT_INSPECT_SIMULATOR_H

#include "weft/plan/Bundle.h"
#include "weft/planner/Cluster.h"
#include "weft/planner/CostModel.h"

#include <optional>
#include <string>
#include <vector>

namespace weft::inspect {

bool isComputeOp(plan::Opcode opcode);
bool isCommOp(plan::Opcode opcode); // collectives and send/recv
/// How many of `inst`'s operands lie in `program`'s host region (optimizer
/// offload): such an instruction is costed on the host.
int64_t hostOperands(const plan::Program &program,
                     const plan::Instruction &inst);
/// The attention kernel `inst` runs (attention_forward or _backward), costed
/// by its score and context GEMMs; null for any other instruction.
const plan::Kernel *attentionKernel(const plan::Bundle &bundle,
                                    const plan::Instruction &inst);

/// The links a rank's transfers cross: its GPUs' NVLink (groups and peers
/// within its node) or its node's NICs (those spanning nodes).
enum class Link { IntraNode, InterNode };
struct LinkUse {
  Link link = Link::IntraNode;
  planner::CommTime time; // alone on the link
};

/// Seconds of one instruction in isolation (no waiting).
class InstructionCosts {
public:
  InstructionCosts(const plan::Bundle &bundle, planner::Cluster cluster,
                   planner::CostConstants constants = {});

  /// `rank` places point-to-point transfers on the cluster's nodes.
  double seconds(const plan::Instruction &inst, int64_t rank) const;
  /// Bytes the communication instruction moves per rank (the full buffer of
  /// an all-gather or reduce-scatter, the payload otherwise).
  double commBytes(const plan::Instruction &inst) const;
  /// The link a collective or send/recv of `rank` crosses and its time
  /// alone on it; nullopt for other instructions.
  std::optional<LinkUse> linkUse(const plan::Instruction &inst,
                                 int64_t rank) const;

  const planner::Cluster &cluster() const { return hardware; }
  const planner::CostConstants &constants() const { return consts; }

private:
  const plan::Bundle &bundle;
  planner::Cluster hardware;
  planner::CostConstants consts;
  /// [family id][group index]: where each concrete group's members sit.
  std::vector<std::vector<planner::GroupSpan>> spans;
  /// [family id][rank]: the index of the group the rank uses, -1 if none.
  std::vector<std::vector<int64_t>> groupOfRank;

  /// A GEMM's time, as the planner's cost model.
  double gemmSeconds(double m, double n, double k, plan::DType dtype) const;
  /// An attention kernel's FLOP-bound time (its GEMMs), nullopt for other
  /// kernels.
  std::optional<double> attentionSeconds(const plan::Instruction &inst,
                                         int64_t rank) const;
  /// Index of the group of `inst`'s family that `rank` uses; throws
  /// plan::Error if there is none.
  int64_t groupOf(const plan::Instruction &inst, int64_t rank) const;
  /// Optimizer offload: an instruction of `rank` on host memory runs at the
  /// host's speeds (a host<->device copy at the pinned bandwidth; AdamW,
  /// clip or fill on the node's CPU and DRAM, shared by its ranks, with the
  /// planner's CPU AdamW model); nullopt when it touches no host buffer or
  /// the cluster describes no host.
  std::optional<double> hostSeconds(const plan::Instruction &inst,
                                    int64_t rank) const;
};

/// When one instruction ran: `arrive` is when its stream reached it (earlier
/// than `start` when it waited for an event or its communication partners).
struct InstTiming {
  double arrive = 0;
  double start = 0;
  double end = 0;
};

struct RoleTimeline {
  std::vector<std::vector<InstTiming>> streams; // [stream][instruction]
  double end = 0;         // when the role's last instruction finishes
  int64_t firstRank = -1; // -1: no rank runs this role
};

struct Timeline {
  std::vector<RoleTimeline> roles;
  double stepTimeS = 0;
};

/// Simulate one replay of the programs. Throws plan::Error when some stream
/// can never finish (a plan the verifier rejects as deadlocked).
Timeline simulate(const plan::Bundle &bundle, const InstructionCosts &costs);

} // namespace weft::inspect

#endif // WEFT_INSPECT_SIMULATOR_H
