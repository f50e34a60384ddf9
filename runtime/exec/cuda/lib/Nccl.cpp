//===- Nccl.cpp - NCCL communicators of the CUDA backend ------------------===//
//
// The world communicator comes from an ncclUniqueId that world rank 0
// creates and the caller broadcasts (MPI_Bcast in weft-run). Every rank sees
// the whole bundle, so every rank derives the same sorted list of channels
// and splits the world for each in that order, including for channels it
// takes no part in: a (group family, stream name) of collectives gets color
// = the index of the family's group containing this rank (NCCL_SPLIT_NOCOLOR
// if none) and key = the rank's position in it, so NCCL's group rank equals
// the plan's group-relative index; a stream name of sends and receives gets
// the whole world (peers resolved to world ranks). Broadcast roots are
// group-relative, as in the plan.
//
//===----------------------------------------------------------------------===//

#include "Nccl.h"
#include "weft/exec/Error.h"

#include <cstdlib>
#include <map>
#include <utility>

#ifdef WEFT_HAVE_NCCL
#include <nccl.h>
#endif

namespace weft::exec::cuda {

#ifndef WEFT_HAVE_NCCL

std::unique_ptr<NcclComms>
NcclComms::create(const plan::Bundle &, int rank, int,
                  const std::function<void(void *, size_t)> &) {
  throw Error("rank " + std::to_string(rank) +
              ": the CUDA backend was built without NCCL (no multi-rank "
              "support; set NCCL_ROOT and reconfigure)");
}

#else

namespace {

using plan::DType;
using plan::Opcode;

class Comms final : public NcclComms {
public:
  Comms(int rank) : rank_(rank) {}
  ~Comms() override {
    // A clean shutdown destroys; after abort() the handles are gone.
    for (ncclComm_t comm : channels())
      ncclCommDestroy(comm);
    if (world_)
      ncclCommDestroy(world_);
  }

  void init(const plan::Bundle &bundle, int worldSize,
            const std::function<void(void *, size_t)> &broadcastId) {
    // Several communicators per device need one order of all their
    // operations on every GPU, or kernels of two of them can wait on each
    // other. The session issues every rank's communication in the plan's one
    // order (plan::communicationOrder); NCCL >= 2.26 makes the kernels follow
    // the host's order when NCCL_LAUNCH_ORDER_IMPLICIT is set (before 2.26
    // the order had to be built from stream dependencies). A value already in
    // the environment wins; one rank has no peer to wait for.
    int version = 0;
    if (worldSize > 1 && ncclGetVersion(&version) == ncclSuccess &&
        version >= 22600)
      ::setenv("NCCL_LAUNCH_ORDER_IMPLICIT", "1", /*overwrite=*/0);
    ncclUniqueId id{};
    if (rank_ == 0)
      check(ncclGetUniqueId(&id), "ncclGetUniqueId", "opening");
    broadcastId(&id, sizeof id);
    check(ncclCommInitRank(&world_, worldSize, id, rank_), "ncclCommInitRank",
          "opening");
    CommunicationChannels all = communicationChannels(bundle);
    // Collective over the world: every rank splits for every channel.
    for (const auto &channel : all.collectives) {
      int color = NCCL_SPLIT_NOCOLOR, key = 0;
      if (channel.first >= 0 && size_t(channel.first) < bundle.groups.size()) {
        const plan::GroupFamily &family = bundle.groups[size_t(channel.first)];
        for (size_t g = 0; g < family.groups.size(); ++g) {
          int64_t index = plan::groupIndexOf(family.groups[g], rank_);
          if (index >= 0) {
            color = int(g);
            key = int(index);
            break;
          }
        }
      }
      ncclComm_t comm = nullptr;
      check(ncclCommSplit(world_, color, key, &comm, nullptr), "ncclCommSplit",
            "opening group family " + std::to_string(channel.first) +
                " on stream '" + channel.second + "'");
      if (comm)
        collective_[channel] = comm;
    }
    for (const std::string &name : all.pointToPoint) {
      ncclComm_t comm = nullptr;
      check(ncclCommSplit(world_, 0, rank_, &comm, nullptr), "ncclCommSplit",
            "opening send/recv stream '" + name + "'");
      p2p_[name] = comm;
    }
    // Send/recv peers are group-relative in the plan: this rank's group of
    // every family, in world ranks.
    groups_.assign(bundle.groups.size(), {});
    for (const plan::GroupFamily &family : bundle.groups)
      if (const std::vector<int64_t> *group =
              plan::resolveGroup(bundle, family.id, rank_))
        groups_[size_t(family.id)] = *group;
  }

  void issue(const plan::Instruction &inst, const std::vector<Operand> &reads,
             const std::vector<Operand> &writes, const std::string &streamName,
             cudaStream_t stream, const std::string &where) override {
    bool p2p = plan::isPointToPoint(inst.opcode);
    ncclComm_t comm = nullptr;
    int peer = int(inst.peer);
    if (p2p) {
      auto it = p2p_.find(streamName);
      comm = it == p2p_.end() ? nullptr : it->second;
      const std::vector<int64_t> *group =
          inst.group >= 0 && size_t(inst.group) < groups_.size()
              ? &groups_[size_t(inst.group)]
              : nullptr;
      if (!group || inst.peer < 0 || size_t(inst.peer) >= group->size())
        fail(where, "peer " + std::to_string(inst.peer) + " of group family " +
                        std::to_string(inst.group) +
                        " is not in this rank's group");
      peer = int((*group)[size_t(inst.peer)]);
    } else {
      auto it = collective_.find({inst.group, streamName});
      comm = it == collective_.end() ? nullptr : it->second;
    }
    if (!comm)
      fail(where, "group family " + std::to_string(inst.group) +
                      " on stream '" + streamName +
                      "' has no communicator containing this rank");
    ncclDataType_t type = dataType(inst.dtype, where);
    ncclRedOp_t op = inst.reduce == plan::ReduceOp::Max   ? ncclMax
                     : inst.reduce == plan::ReduceOp::Min ? ncclMin
                                                          : ncclSum;
    // all_reduce, reduce_scatter and all_gather may have several members:
    // one NCCL call each, inside one ncclGroupStart/End so that they launch
    // together (nested inside the session's bucket group, if any, which NCCL
    // merges into the outer group). The members are independent (a
    // structural check), so their order inside the group does not matter.
    size_t members = operandMembers(inst, reads);
    if (members > 1)
      startGroup(where);
    for (size_t m = 0; m < members; ++m) {
      size_t count = size_t(operandMemberElements(inst, reads, writes, m));
      const char *call = "";
      ncclResult_t rc = ncclSuccess;
      switch (inst.opcode) {
      case Opcode::AllReduce:
        call = "ncclAllReduce";
        rc = ncclAllReduce(reads[m].data, writes[m].data, count, type, op, comm,
                           stream);
        break;
      case Opcode::ReduceScatter:
        call = "ncclReduceScatter";
        rc = ncclReduceScatter(reads[m].data, writes[m].data, count, type, op,
                               comm, stream);
        break;
      case Opcode::AllGather:
        // Straight into the flat output buffer (in place when the input is
        // this rank's block of it).
        call = "ncclAllGather";
        rc = ncclAllGather(reads[m].data, writes[m].data, count, type, comm,
                           stream);
        break;
      case Opcode::Broadcast:
        call = "ncclBroadcast";
        rc = ncclBroadcast(writes[0].data, writes[0].data, count, type,
                           int(inst.peer), comm, stream);
        break;
      case Opcode::Send:
        call = "ncclSend";
        rc = ncclSend(reads[0].data, count, type, peer, comm, stream);
        break;
      case Opcode::Recv:
        call = "ncclRecv";
        rc = ncclRecv(writes[0].data, count, type, peer, comm, stream);
        break;
      default:
        fail(where, std::string(plan::toString(inst.opcode)) +
                        " is not a communication instruction");
      }
      bool failed = rc != ncclSuccess && rc != ncclInProgress;
      if (failed && members > 1) // the member in the message, built only then
        check(rc, call,
              where + " (member " + std::to_string(m) + " of " +
                  std::to_string(members) + ")");
      check(rc, call, where);
    }
    if (members > 1)
      endGroup(where);
  }

  void groupStart() override { startGroup(""); }
  void groupEnd() override { endGroup(""); }

  std::string asyncError() override {
    std::vector<ncclComm_t> all = channels();
    if (world_)
      all.push_back(world_);
    for (ncclComm_t comm : all) {
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(comm, &state) == ncclSuccess &&
          state != ncclSuccess && state != ncclInProgress) {
        std::string detail = ncclGetErrorString(state);
        const char *last = ncclGetLastError(comm);
        if (last && *last)
          detail += std::string(": ") + last;
        return detail;
      }
    }
    return {};
  }

  void abort() noexcept override {
    std::vector<ncclComm_t> all = channels();
    if (world_)
      all.push_back(world_);
    // One at a time, an abort can wait on the device for an operation of a
    // communicator not aborted yet (a peer gone mid-collective), and hang;
    // NCCL 2.22 aborts the communicators of one group together. A failure
    // inside a bucket (or a multi-member call) leaves its group open: the
    // aborts join it and ending it runs them with what it holds (whose
    // communicators are then flagged aborted, so nothing waits on a peer).
    int version = 0;
    bool together = ncclGetVersion(&version) == ncclSuccess && version >= 22200;
    if (together) {
      if (groupDepth_ == 0) {
        ncclGroupStart();
        ++groupDepth_;
      }
      for (ncclComm_t comm : all)
        ncclCommAbort(comm);
    }
    for (; groupDepth_ > 0; --groupDepth_)
      ncclGroupEnd();
    if (!together)
      for (ncclComm_t comm : all)
        ncclCommAbort(comm);
    collective_.clear();
    p2p_.clear();
    world_ = nullptr;
  }

private:
  ncclDataType_t dataType(DType dtype, const std::string &where) {
    switch (dtype) {
    case DType::F32:
      return ncclFloat32;
    case DType::F64:
      return ncclFloat64;
    case DType::F16:
      return ncclFloat16;
    case DType::BF16:
      return ncclBfloat16;
    case DType::I32:
      return ncclInt32;
    case DType::I64:
      return ncclInt64;
    case DType::U8:
      return ncclUint8;
    case DType::U16:
      break;
    }
    fail(where, "NCCL has no " + std::string(plan::toString(dtype)) + " type");
  }

  /// Throws; the caller aborts the communicators (create() here, the
  /// backend after an issue: it first drops a captured graph, since NCCL's
  /// abort waits for the graphs that hold its calls to be destroyed).
  [[noreturn]] void fail(const std::string &where, const std::string &what) {
    throw Error("rank " + std::to_string(rank_) + ": " +
                (where.empty() ? "" : where + ": ") + what +
                " (NCCL communicators aborted)");
  }

  void check(ncclResult_t rc, const char *call, const std::string &where) {
    if (rc == ncclSuccess || rc == ncclInProgress)
      return;
    std::string detail = ncclGetErrorString(rc);
    const char *last = ncclGetLastError(world_);
    if (last && *last)
      detail += std::string(": ") + last;
    fail(where, std::string(call) + " failed: " + detail);
  }

  /// ncclGroupStart/End, counted: abort() ends a group a failure left open.
  void startGroup(const std::string &where) {
    check(ncclGroupStart(), "ncclGroupStart", where);
    ++groupDepth_;
  }
  void endGroup(const std::string &where) {
    --groupDepth_; // NCCL leaves the group even when its end fails
    check(ncclGroupEnd(), "ncclGroupEnd", where);
  }

  /// Every channel's communicator (not the world's).
  std::vector<ncclComm_t> channels() const {
    std::vector<ncclComm_t> out;
    for (const auto &entry : collective_)
      out.push_back(entry.second);
    for (const auto &entry : p2p_)
      out.push_back(entry.second);
    return out;
  }

  int rank_ = 0;
  int groupDepth_ = 0; // open ncclGroupStarts of this thread's calls here
  ncclComm_t world_ = nullptr;
  std::map<std::pair<int64_t, std::string>, ncclComm_t> collective_;
  std::map<std::string, ncclComm_t> p2p_;    // by plan stream name
  std::vector<std::vector<int64_t>> groups_; // by family: world ranks
};

} // namespace

std::unique_ptr<NcclComms>
NcclComms::create(const plan::Bundle &bundle, int rank, int worldSize,
                  const std::function<void(void *, size_t)> &broadcastId) {
  auto comms = std::make_unique<Comms>(rank);
  try {
    comms->init(bundle, worldSize, broadcastId);
  } catch (...) {
    comms->abort();
    throw;
  }
  return comms;
}

#endif // WEFT_HAVE_NCCL

} // namespace weft::exec::cuda
