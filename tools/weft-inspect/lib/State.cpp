//===- State.cpp - Where each state group of a plan lives -----------------===//

#include "weft/inspect/State.h"
#include "weft/exec/StateGroups.h"
#include "weft/inspect/Report.h"

#include <sstream>

namespace weft::inspect {

using nlohmann::json;

json stateJson(const plan::Bundle &bundle, std::optional<int64_t> rank) {
  std::vector<int64_t> roles;
  if (rank) {
    roles.push_back(plan::rankToRole(bundle, *rank));
  } else {
    for (const plan::Program &program : bundle.programs)
      roles.push_back(program.role);
  }
  json out = json::array();
  for (int64_t role : roles) {
    const plan::Program &program = bundle.programs[size_t(role)];
    std::vector<int64_t> ranks;
    for (size_t r = 0; r < bundle.rankRoles.size(); ++r)
      if (bundle.rankRoles[r] == role)
        ranks.push_back(int64_t(r));
    auto layout = exec::stateGroupLayout(bundle, program);
    json groups = json::array();
    for (const exec::StateGroupLayout &g : layout) {
      bool arena = g.region == plan::Region::Arena;
      // Wholly in the plan's host region (optimizer offload): never moved.
      bool hostOnly = g.bytes == 0 && g.hostBytes > 0;
      json buffers = json::array(), ranges = json::array(),
           hostRanges = json::array();
      for (int64_t id : g.buffers)
        buffers.push_back(program.buffers[size_t(id)].name);
      for (const exec::ByteRange &r : g.ranges)
        ranges.push_back({r.offset, r.bytes});
      for (const exec::ByteRange &r : g.hostRanges)
        hostRanges.push_back({r.offset, r.bytes});
      groups.push_back(
          {{"group", exec::toString(g.group)},
           {"region", plan::toString(g.region)},
           {"bytes", g.bytes},
           {"buffers", buffers},
           {"ranges", ranges},
           {"host_bytes", g.hostBytes},
           {"host_ranges", hostRanges},
           {"between_steps", arena      ? "dead (the verifier proves no step "
                                          "reads what an earlier one wrote)"
                             : hostOnly ? "live in host memory"
                                        : "live on the device"},
           {"offload", arena      ? "released, no copy"
                       : hostOnly ? "nothing to move (host memory already)"
                                  : "copied to host memory, "
                                    "device bytes released"},
           {"in_weights_snapshot", g.group == exec::StateGroup::Params}});
    }
    out.push_back({{"role", role},
                   {"ranks", ranks},
                   {"persistent_bytes", program.persistentBytes},
                   {"arena_bytes", program.arenaBytes},
                   {"host_bytes", program.hostBytes},
                   {"groups", groups}});
  }
  return {{"roles", out},
          {"classification",
           "derived from the instructions (the plan has no per-buffer "
           "category): see docs/runtime.md, State groups"}};
}

std::string stateText(const json &state) {
  std::ostringstream text;
  for (const json &role : state["roles"]) {
    std::vector<int64_t> ranks = role["ranks"].get<std::vector<int64_t>>();
    text << "role " << role["role"].get<int64_t>() << " (ranks "
         << formatRanks(ranks) << "): persistent "
         << formatBytes(double(role["persistent_bytes"].get<int64_t>()))
         << ", arena "
         << formatBytes(double(role["arena_bytes"].get<int64_t>()));
    if (role["host_bytes"].get<int64_t>() > 0)
      text << ", host "
           << formatBytes(double(role["host_bytes"].get<int64_t>()));
    text << "\n";
    for (const json &g : role["groups"]) {
      const json &buffers = g["buffers"];
      text << "  " << g["group"].get<std::string>();
      text << std::string(
          18 - std::min<size_t>(17, g["group"].get<std::string>().size()), ' ');
      int64_t hostBytes = g["host_bytes"].get<int64_t>();
      if (g["bytes"].get<int64_t>() > 0 || hostBytes == 0)
        text << formatBytes(double(g["bytes"].get<int64_t>())) << " in "
             << g["region"].get<std::string>() << ", " << g["ranges"].size()
             << " range(s)";
      if (hostBytes > 0)
        text << (g["bytes"].get<int64_t>() > 0 ? " + " : "")
             << formatBytes(double(hostBytes)) << " in host, "
             << g["host_ranges"].size() << " range(s)";
      text << "; offload: " << g["offload"].get<std::string>();
      if (!buffers.empty()) {
        text << "; buffers:";
        size_t shown = 0;
        for (const json &name : buffers) {
          if (shown++ == 6) {
            text << " ... (" << buffers.size() << ")";
            break;
          }
          text << " " << name.get<std::string>();
        }
      }
      text << "\n";
    }
  }
  text << "classification: " << state["classification"].get<std::string>()
       << "\n";
  return text.str();
}

} // namespace weft::inspect
