#include "fabric_plan.h"

#include <cstdlib>
#include <set>

#include "check.h"
#include "gang.h"
#include "scenario.h"

namespace pb {

namespace {

std::string join_hosts(const std::set<std::string>& hosts) {
  std::string out;
  for (const std::string& h : hosts) out += (out.empty() ? "" : ", ") + h;
  return out;
}

// "ranks 0-3 on a, ranks 4-7 on b" (runs of equal hosts), for messages.
std::string ranks_by_host(const std::vector<std::string>& hosts) {
  std::string out;
  for (size_t r = 0; r < hosts.size();) {
    size_t e = r;
    while (e + 1 < hosts.size() && hosts[e + 1] == hosts[r]) ++e;
    out += (out.empty() ? "" : ", ") + (e == r ? "rank " + std::to_string(r)
                                               : "ranks " + std::to_string(r) + "-" + std::to_string(e)) +
           " on " + hosts[r];
    r = e + 1;
  }
  return out;
}

}  // namespace

const char* transport_name(Transport t) { return t == Transport::ipc ? "ipc" : "nccl"; }

std::string emulated_host_id(int host) { return "pb-emulated-host-" + std::to_string(host); }

int emulated_host(int rank, int cp, int hosts) {
  PB_CHECK(hosts >= 1 && cp >= 1 && cp % hosts == 0 && rank >= 0 && rank < cp,
           "emulated_host: the hosts must divide cp and the rank lie in [0, cp)");
  return rank / (cp / hosts);
}

Transport FabricPlan::between(int a, int b) const {
  PB_CHECK(a >= 0 && a < cp() && b >= 0 && b < cp(),
           "FabricPlan: ranks " + std::to_string(a) + ", " + std::to_string(b) + " outside [0, " +
               std::to_string(cp()) + ")");
  return pairs[size_t(a)][size_t(b)];
}

bool FabricPlan::any_nccl() const {
  for (int r = 0; r < cp(); ++r)
    if (uses_nccl(r)) return true;
  return false;
}

bool FabricPlan::uses_nccl(int rank) const {
  for (int p = 0; p < cp(); ++p)
    if (between(rank, p) == Transport::nccl) return true;
  return false;
}

std::vector<bool> FabricPlan::nccl_peers(int rank) const {
  std::vector<bool> out(size_t(cp()), false);
  for (int p = 0; p < cp(); ++p) out[size_t(p)] = between(rank, p) == Transport::nccl;
  return out;
}

std::string FabricPlan::describe_pairs() const {
  std::string by[2];
  for (int a = 0; a < cp(); ++a)
    for (int b = a + 1; b < cp(); ++b) by[int(between(a, b))] += " " + std::to_string(a) + "-" + std::to_string(b);
  std::string out;
  for (Transport t : {Transport::ipc, Transport::nccl})
    if (!by[int(t)].empty()) out += (out.empty() ? "" : ", ") + std::string(transport_name(t)) + by[int(t)];
  return out.empty() ? "none (one rank)" : out;
}

std::string FabricPlan::describe_hosts() const {
  std::string out;
  for (int r = 0; r < cp(); ++r) out += (r ? ", " : "") + std::to_string(r) + ": " + hosts[size_t(r)];
  return out;
}

FabricPlan plan_fabric(const std::string& mode, const std::vector<std::string>& real_hosts, int emulate_hosts,
                       const std::string& where) {
  const int cp = int(real_hosts.size());
  PB_CHECK(cp >= 1, where + ": the fabric needs at least one rank");
  PB_CHECK(mode == "ipc" || mode == "nccl" || mode == "auto",
           where + ": key 'fabric': '" + mode + "' is not allowed; allowed values: ipc, nccl, auto");
  PB_CHECK(emulate_hosts >= 0 && (emulate_hosts == 0 || cp % emulate_hosts == 0),
           where + ": key 'emulate_hosts': " + std::to_string(emulate_hosts) + " does not divide cp " +
               std::to_string(cp) + "; allowed: 0 (the real hosts) or a divisor of cp");
  const std::set<std::string> real(real_hosts.begin(), real_hosts.end());
  FabricPlan p;
  p.mode = mode;
  p.emulated_hosts = emulate_hosts;
  if (emulate_hosts > 0) {
    PB_CHECK(real.size() == 1, where + ": key 'emulate_hosts': emulated hosts share one machine (ranks of one "
                                       "emulated host map each other over CUDA IPC), but the ranks run on " +
                                   std::to_string(real.size()) + " hosts (" + join_hosts(real) +
                                   "); set emulate_hosts: 0 for a real multi-host run");
    for (int r = 0; r < cp; ++r) p.hosts.push_back(emulated_host_id(emulated_host(r, cp, emulate_hosts)));
  } else {
    p.hosts = real_hosts;
  }
  const std::set<std::string> hosts(p.hosts.begin(), p.hosts.end());
  PB_CHECK(mode != "ipc" || hosts.size() == 1,
           where + ": key 'fabric': ipc maps peers over CUDA IPC inside one host, but the ranks are on " +
               std::to_string(hosts.size()) + " hosts (" + ranks_by_host(p.hosts) +
               "); allowed across hosts: fabric nccl or auto");
  p.pairs.assign(size_t(cp), std::vector<Transport>(size_t(cp), Transport::ipc));
  for (int a = 0; a < cp; ++a)
    for (int b = 0; b < cp; ++b) {
      if (a == b) continue;
      const bool cross = p.hosts[size_t(a)] != p.hosts[size_t(b)];
      p.pairs[size_t(a)][size_t(b)] = mode == "nccl" || (mode == "auto" && cross) ? Transport::nccl : Transport::ipc;
    }
  return p;
}

FabricPlan scenario_fabric_plan(const Scenario& s) {
  return plan_fabric(s.fabric, std::vector<std::string>(size_t(s.cp), "this-host"), s.emulate_hosts, s.source);
}

std::vector<std::string> all_gather(const Gang& gang, const std::string& mine) {
  std::string joined;
  for (const std::string& p : gang.gather(mine)) joined += std::to_string(p.size()) + ":" + p;
  joined = gang.broadcast(joined);
  std::vector<std::string> out;
  for (size_t pos = 0; pos < joined.size();) {
    const size_t colon = joined.find(':', pos);
    PB_CHECK(colon != std::string::npos, "all_gather: a malformed exchange between ranks");
    const size_t n = std::stoul(joined.substr(pos, colon - pos));
    out.push_back(joined.substr(colon + 1, n));
    pos = colon + 1 + n;
  }
  PB_CHECK(int(out.size()) == gang.size(), "all_gather: a malformed exchange between ranks");
  return out;
}

std::vector<std::string> gang_hosts(const Gang& gang) { return all_gather(gang, gang.host()); }

FabricPlan gang_fabric_plan(const Gang& gang, const Scenario& s) {
  return plan_fabric(s.fabric, gang_hosts(gang), s.emulate_hosts, s.source);
}

std::vector<EnvSetting> nccl_environment_for(const FabricPlan& plan, int rank, bool serialized) {
  if (!plan.uses_nccl(rank)) return {};
  std::vector<EnvSetting> env = {{"NCCL_NVLS_ENABLE", "0", true}};
  if (plan.emulated_hosts > 0) env.push_back({"NCCL_HOSTID", plan.hosts[size_t(rank)], true});
  if (!serialized) env.push_back({"CUDA_MODULE_LOADING", "EAGER", false});
  return env;
}

void prepare_nccl_environment(const FabricPlan& plan, int rank, bool serialized) {
  for (const EnvSetting& e : nccl_environment_for(plan, rank, serialized))
    PB_CHECK(setenv(e.name.c_str(), e.value.c_str(), e.overwrite ? 1 : 0) == 0, "setenv(" + e.name + ") failed");
}

}  // namespace pb
