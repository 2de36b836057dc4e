// Which transport carries each pair of ranks of the CP lane (scenario keys
// `fabric` and `emulate_hosts`; docs/design.md §3 "Fabric", §10). Pure host
// code: no CUDA, no NCCL; the gang only gathers the host names.
//
//   fabric: ipc    every pair over CUDA IPC; ranks on different hosts stop at start
//   fabric: nccl   every pair over NCCL (the cross-node path, also inside a host)
//   fabric: auto   per pair: CUDA IPC inside a host, NCCL across hosts
//
// Emulated hosts (emulate_hosts: N, N divides cp) put rank r on host
// r / (cp / N), named emulated_host_id(host). NCCL learns the same ids through
// NCCL_HOSTID (prepare_nccl_environment), so its routing and this plan agree:
// across emulated hosts NCCL takes its network transport (sockets on one
// machine), the path that crosses trays. Emulation needs every rank on one
// real machine. NCCL_HOSTID is set only for emulated hosts: the same value on
// two real hosts would make them one host to NCCL.
//
//   FabricPlan p = plan_fabric("auto", {"a", "a", "a", "a"}, 2, "cp4.yaml");
//   p.between(0, 1) == Transport::ipc;  p.between(1, 2) == Transport::nccl
#pragma once

#include <string>
#include <vector>

namespace pb {

class Gang;
struct Scenario;

enum class Transport { ipc, nccl };
const char* transport_name(Transport t);

// "pb-emulated-host-<host>": the host id of an emulated host, for NCCL and for this plan.
std::string emulated_host_id(int host);
// The emulated host of `rank` when `hosts` emulated hosts share cp ranks: rank / (cp / hosts).
int emulated_host(int rank, int cp, int hosts);

struct FabricPlan {
  std::string mode = "ipc";        // ipc | nccl | auto
  int emulated_hosts = 0;          // 0: the hosts are the ranks' real hosts
  std::vector<std::string> hosts;  // [rank]: the host each rank is on (the emulated id when emulated)
  std::vector<std::vector<Transport>> pairs;  // [a][b], symmetric; a rank to itself: ipc (its own slab)

  int cp() const { return int(hosts.size()); }
  Transport between(int a, int b) const;
  bool any_nccl() const;
  // Whether `rank` links to any peer over NCCL (only those ranks touch NCCL).
  bool uses_nccl(int rank) const;
  // [peer]: whether `rank` reaches `peer` over NCCL.
  std::vector<bool> nccl_peers(int rank) const;
  // "ipc 0-1 2-3, nccl 0-2 0-3 1-2 1-3" (pairs a < b), for results and messages.
  std::string describe_pairs() const;
  // "0: h0, 1: h0, 2: h1, ..." for results.
  std::string describe_hosts() const;
};

// The plan for ranks on `real_hosts` ([rank] -> host name). Throws pb::Error
// naming `where` (the scenario file) and the key when:
//   - mode is not ipc, nccl or auto;
//   - emulate_hosts is negative or does not divide cp;
//   - emulate_hosts > 0 and the ranks are on more than one real host;
//   - mode ipc and the ranks are on more than one host (naming the hosts).
FabricPlan plan_fabric(const std::string& mode, const std::vector<std::string>& real_hosts, int emulate_hosts,
                       const std::string& where);

// The plan a scenario would get on one machine (plan's and the run's memory
// budgets): every rank on one real host, emulated hosts as the scenario says.
// A real multi-host run under fabric auto links more pairs over NCCL than this.
FabricPlan scenario_fabric_plan(const Scenario& s);

// Every rank's `mine`, on every rank, in rank order. Collective over the gang.
std::vector<std::string> all_gather(const Gang& gang, const std::string& mine);
// Every rank's host name, on every rank. Collective over the gang.
std::vector<std::string> gang_hosts(const Gang& gang);
// The plan of the gang for a scenario (plan_fabric over gang_hosts). Collective.
FabricPlan gang_fabric_plan(const Gang& gang, const Scenario& s);

// What this process must carry in its environment before NCCL (and, for the
// module loading mode, CUDA) starts, for `rank` under `plan`; empty when the
// rank does not use NCCL. NCCL_NVLS_ENABLE=0 always (NVLink multicast stays
// off on shared machines); NCCL_HOSTID = the emulated host id, only when the
// hosts are emulated; with concurrent ranks (not serialized),
// CUDA_MODULE_LOADING=EAGER unless already set (fabric.h: a kernel loaded
// lazily waits for the device to drain, which an NCCL transfer waiting on a
// peer's host may not do).
struct EnvSetting {
  std::string name, value;
  bool overwrite = true;  // false: only when the variable is unset
};
std::vector<EnvSetting> nccl_environment_for(const FabricPlan& plan, int rank, bool serialized);
// setenv()s the settings. Call before the first CUDA or NCCL call of the process.
void prepare_nccl_environment(const FabricPlan& plan, int rank, bool serialized);

}  // namespace pb
