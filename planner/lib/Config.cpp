//===- Config.cpp - Enum spellings and plan descriptions ------------------===//

#include "weft/planner/Config.h"
#include "weft/planner/Error.h"

#include <sstream>

namespace weft::planner {

std::string_view toString(Precision precision) {
  switch (precision) {
  case Precision::BF16:
    return "bf16";
  case Precision::FP16:
    return "fp16";
  case Precision::FP32:
    return "fp32";
  }
  return "?";
}

std::string_view toString(Recompute recompute) {
  switch (recompute) {
  case Recompute::None:
    return "none";
  case Recompute::Selective:
    return "selective";
  case Recompute::Full:
    return "full";
  }
  return "?";
}

std::string_view toString(Schedule schedule) {
  switch (schedule) {
  case Schedule::GPipe:
    return "gpipe";
  case Schedule::OneFOneB:
    return "1f1b";
  case Schedule::Interleaved:
    return "interleaved";
  }
  return "?";
}

std::string_view toString(Offload offload) {
  return offload == Offload::Optimizer ? "optimizer" : "none";
}

std::string_view toString(Attention attention) {
  return attention == Attention::Eager ? "eager" : "flash";
}

Precision parsePrecision(std::string_view text) {
  for (Precision p : {Precision::BF16, Precision::FP16, Precision::FP32})
    if (text == toString(p))
      return p;
  throw Error("unknown precision '" + std::string(text) +
              "' (expected bf16|fp16|fp32)");
}

Recompute parseRecompute(std::string_view text) {
  for (Recompute r : {Recompute::None, Recompute::Selective, Recompute::Full})
    if (text == toString(r))
      return r;
  throw Error("unknown recompute mode '" + std::string(text) +
              "' (expected none|selective|full)");
}

Schedule parseSchedule(std::string_view text) {
  for (Schedule s :
       {Schedule::GPipe, Schedule::OneFOneB, Schedule::Interleaved})
    if (text == toString(s))
      return s;
  throw Error("unknown pipeline schedule '" + std::string(text) +
              "' (expected gpipe|1f1b|interleaved)");
}

Offload parseOffload(std::string_view text) {
  for (Offload o : {Offload::None, Offload::Optimizer})
    if (text == toString(o))
      return o;
  throw Error("unknown offload mode '" + std::string(text) +
              "' (expected none|optimizer)");
}

Attention parseAttention(std::string_view text) {
  for (Attention a : {Attention::Flash, Attention::Eager})
    if (text == toString(a))
      return a;
  throw Error("unknown attention implementation '" + std::string(text) +
              "' (expected flash|eager)");
}

int64_t computeElementBytes(Precision precision) {
  return precision == Precision::FP32 ? 4 : 2;
}

std::string ParallelConfig::describe() const {
  std::ostringstream os;
  os << "TP=" << tp << " PP=" << pp << " DP=" << dp << " ZeRO-" << zero
     << " mb=" << microBatch << " ga=" << gradAccum
     << " rc=" << toString(recompute);
  if (pp > 1) {
    os << ' ' << toString(schedule);
    if (schedule == Schedule::Interleaved)
      os << "(v=" << virtualStages << ')';
  }
  if (sequenceParallel)
    os << " SP";
  if (offload == Offload::Optimizer)
    os << " offload";
  return os.str();
}

bool Constraints::allFixed() const {
  bool scheduleFixed =
      (pp && *pp == 1) ||
      (schedule && (*schedule != Schedule::Interleaved || virtualStages));
  bool spFixed = sequenceParallel.has_value() || (tp && *tp == 1);
  return tp && pp && zero && microBatch && recompute && scheduleFixed &&
         spFixed;
}

} // namespace weft::planner
