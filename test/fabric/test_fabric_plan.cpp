// The fabric's locality and staging on the host (CI): which pairs of ranks
// are CUDA IPC and which NCCL for given host names, fabric modes and emulated
// hosts (fabric_plan.h); the errors of bad set-ups (scenario keys fabric and
// emulate_hosts); the environment an NCCL rank gets; and each rank's NCCL
// staging in its slab (slab_layout.h with_nccl_staging).
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "check.h"
#include "fabric_plan.h"
#include "scenario.h"
#include "schedule.h"
#include "slab_layout.h"

using namespace pb;

namespace {

using Hosts = std::vector<std::string>;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

// The pairs over `t`, "a-b" with a < b, ascending.
std::vector<std::string> pairs_over(const FabricPlan& p, Transport t) {
  std::vector<std::string> out;
  for (int a = 0; a < p.cp(); ++a)
    for (int b = a + 1; b < p.cp(); ++b)
      if (p.between(a, b) == t) out.push_back(std::to_string(a) + "-" + std::to_string(b));
  return out;
}

std::string scenario_text(int cp, const std::string& extra) {
  return "name: t\nmodel: {preset: tiny}\ncp: " + std::to_string(cp) + "\ncontext: " + std::to_string(128 * cp) +
         "\n" + extra;
}

std::string scenario_error(const std::string& text, const ScenarioOverrides& o = {}) {
  return error_of([&] { parse_scenario(text, "bad.yaml", o); });
}

}  // namespace

TEST_CASE("auto: IPC inside a host, NCCL across hosts; symmetric, the diagonal IPC") {
  const FabricPlan p = plan_fabric("auto", {"a", "a", "a", "a", "b", "b", "b", "b"}, 0, "s.yaml");
  CHECK(p.cp() == 8);
  CHECK(p.emulated_hosts == 0);
  for (int a = 0; a < 8; ++a)
    for (int b = 0; b < 8; ++b) {
      CAPTURE(a);
      CAPTURE(b);
      CHECK(p.between(a, b) == p.between(b, a));
      CHECK(p.between(a, b) == ((a < 4) == (b < 4) ? Transport::ipc : Transport::nccl));
    }
  CHECK(p.any_nccl());
  CHECK(p.uses_nccl(0));
  CHECK(p.nccl_peers(1) == std::vector<bool>{false, false, false, false, true, true, true, true});
  CHECK(pairs_over(p, Transport::ipc).size() == 12);  // 2 x C(4, 2)
  CHECK(pairs_over(p, Transport::nccl).size() == 16);  // 4 x 4
  CHECK(contains(p.describe_pairs(), "ipc 0-1 0-2 0-3 1-2"));
  CHECK(contains(p.describe_pairs(), "nccl 0-4 0-5"));
  CHECK(p.describe_hosts() == "0: a, 1: a, 2: a, 3: a, 4: b, 5: b, 6: b, 7: b");
}

TEST_CASE("auto on one host is all IPC; nccl is all NCCL, inside a host too; ipc on one host") {
  const FabricPlan one = plan_fabric("auto", Hosts(4, "a"), 0, "s.yaml");
  CHECK_FALSE(one.any_nccl());
  CHECK(pairs_over(one, Transport::ipc).size() == 6);
  const FabricPlan all = plan_fabric("nccl", Hosts(4, "a"), 0, "s.yaml");
  CHECK(pairs_over(all, Transport::nccl).size() == 6);
  CHECK(all.between(2, 2) == Transport::ipc);  // a rank's own slab
  CHECK_FALSE(plan_fabric("ipc", Hosts(2, "a"), 0, "s.yaml").any_nccl());
  CHECK(plan_fabric("ipc", Hosts(1, "a"), 0, "s.yaml").describe_pairs() == "none (one rank)");
}

TEST_CASE("hosts that interleave: every cross pair is NCCL") {
  const FabricPlan p = plan_fabric("auto", {"a", "b", "a", "b"}, 0, "s.yaml");
  CHECK(pairs_over(p, Transport::ipc) == std::vector<std::string>{"0-2", "1-3"});
  CHECK(pairs_over(p, Transport::nccl) == std::vector<std::string>{"0-1", "0-3", "1-2", "2-3"});
}

TEST_CASE("emulated hosts: rank r on host r / (cp / N), named pb-emulated-host-<h>") {
  CHECK(emulated_host_id(3) == "pb-emulated-host-3");
  CHECK(emulated_host(0, 4, 2) == 0);
  CHECK(emulated_host(1, 4, 2) == 0);
  CHECK(emulated_host(2, 4, 2) == 1);
  CHECK(emulated_host(3, 4, 2) == 1);
  CHECK(emulated_host(5, 8, 8) == 5);
  CHECK(emulated_host(7, 8, 1) == 0);
  CHECK_THROWS_AS(emulated_host(0, 4, 3), Error);

  const FabricPlan two = plan_fabric("auto", Hosts(4, "gpu01"), 2, "s.yaml");
  CHECK(two.emulated_hosts == 2);
  CHECK(two.hosts == Hosts{"pb-emulated-host-0", "pb-emulated-host-0", "pb-emulated-host-1", "pb-emulated-host-1"});
  CHECK(pairs_over(two, Transport::ipc) == std::vector<std::string>{"0-1", "2-3"});
  CHECK(pairs_over(two, Transport::nccl) == std::vector<std::string>{"0-2", "0-3", "1-2", "1-3"});

  const FabricPlan each = plan_fabric("nccl", Hosts(4, "gpu01"), 4, "s.yaml");
  CHECK(pairs_over(each, Transport::nccl).size() == 6);
  CHECK(each.hosts[3] == "pb-emulated-host-3");
  // One emulated host is one host: auto is all IPC.
  CHECK_FALSE(plan_fabric("auto", Hosts(4, "gpu01"), 1, "s.yaml").any_nccl());
}

TEST_CASE("bad set-ups: ipc across hosts names them; emulation must divide cp and stay on one machine") {
  const std::string across = error_of([] { plan_fabric("ipc", {"a", "a", "b", "b"}, 0, "cp4.yaml"); });
  CHECK(contains(across, "cp4.yaml: key 'fabric'"));
  CHECK(contains(across, "ranks 0-1 on a, ranks 2-3 on b"));
  CHECK(contains(across, "allowed across hosts: fabric nccl or auto"));
  const std::string emulated = error_of([] { plan_fabric("ipc", Hosts(4, "a"), 2, "cp4.yaml"); });
  CHECK(contains(emulated, "ranks 0-1 on pb-emulated-host-0, ranks 2-3 on pb-emulated-host-1"));
  const std::string divide = error_of([] { plan_fabric("auto", Hosts(4, "a"), 3, "cp4.yaml"); });
  CHECK(contains(divide, "key 'emulate_hosts': 3 does not divide cp 4"));
  const std::string machines = error_of([] { plan_fabric("auto", {"a", "a", "b", "b"}, 2, "cp4.yaml"); });
  CHECK(contains(machines, "key 'emulate_hosts'"));
  CHECK(contains(machines, "2 hosts (a, b)"));
  const std::string mode = error_of([] { plan_fabric("rdma", Hosts(2, "a"), 0, "cp2.yaml"); });
  CHECK(contains(mode, "'rdma' is not allowed; allowed values: ipc, nccl, auto"));
}

TEST_CASE("the environment of an NCCL rank: NVLS off, NCCL_HOSTID only for emulated hosts, eager modules when concurrent") {
  const auto find = [](const std::vector<EnvSetting>& env, const std::string& name) -> const EnvSetting* {
    for (const EnvSetting& e : env)
      if (e.name == name) return &e;
    return nullptr;
  };
  CHECK(nccl_environment_for(plan_fabric("auto", Hosts(4, "a"), 0, "s"), 0, false).empty());  // no NCCL peer
  const std::vector<EnvSetting> emulated =
      nccl_environment_for(plan_fabric("auto", Hosts(4, "a"), 2, "s"), 3, /*serialized=*/false);
  REQUIRE(find(emulated, "NCCL_HOSTID"));
  CHECK(find(emulated, "NCCL_HOSTID")->value == "pb-emulated-host-1");
  REQUIRE(find(emulated, "NCCL_NVLS_ENABLE"));
  CHECK(find(emulated, "NCCL_NVLS_ENABLE")->value == "0");
  REQUIRE(find(emulated, "CUDA_MODULE_LOADING"));
  CHECK(find(emulated, "CUDA_MODULE_LOADING")->value == "EAGER");
  CHECK_FALSE(find(emulated, "CUDA_MODULE_LOADING")->overwrite);
  const std::vector<EnvSetting> real =
      nccl_environment_for(plan_fabric("auto", {"a", "a", "b", "b"}, 0, "s"), 0, /*serialized=*/true);
  CHECK(find(real, "NCCL_NVLS_ENABLE"));
  CHECK_FALSE(find(real, "NCCL_HOSTID"));  // never on real hosts: the same id on two hosts makes them one
  CHECK_FALSE(find(real, "CUDA_MODULE_LOADING"));  // serialized turns defer NCCL sends instead
}

TEST_CASE("scenario keys: emulate_hosts divides cp, is at most cp, and needs a fabric that crosses hosts") {
  CHECK(parse_scenario(scenario_text(4, "emulate_hosts: 2\n"), "t.yaml").emulate_hosts == 2);
  CHECK(parse_scenario(scenario_text(4, ""), "t.yaml").emulate_hosts == 0);
  CHECK(parse_scenario(scenario_text(4, "fabric: nccl\nemulate_hosts: 4\n"), "t.yaml").fabric == "nccl");
  const std::string divide = scenario_error(scenario_text(4, "emulate_hosts: 3\n"));
  CHECK(contains(divide, "bad.yaml:5:"));
  CHECK(contains(divide, "emulate_hosts: 3 does not divide cp 4; allowed: 0 (the real hosts) or a divisor of cp: 1, 2, 4"));
  const std::string big = scenario_error(scenario_text(4, "emulate_hosts: 8\n"));
  CHECK(contains(big, "emulate_hosts: must be between 0 and 4"));
  const std::string ipc = scenario_error(scenario_text(4, "fabric: ipc\nemulate_hosts: 2\n"));
  CHECK(contains(ipc, "emulate_hosts: 2 emulated hosts with fabric ipc"));
  CHECK(contains(ipc, "allowed with emulated hosts: fabric nccl or auto"));
  ScenarioOverrides o;
  o.sets = {"emulate_hosts=3"};
  CHECK(contains(scenario_error(scenario_text(4, ""), o), "command line override 'emulate_hosts=3'"));
  const std::string negative = scenario_error(scenario_text(2, "emulate_hosts: -1\n"));
  CHECK(contains(negative, "must be between 0 and 2"));
}

TEST_CASE("a scenario's planned fabric on one machine: emulated hosts as the scenario says") {
  const Scenario s = parse_scenario(scenario_text(4, "fabric: auto\nemulate_hosts: 2\n"), "t.yaml");
  const FabricPlan p = scenario_fabric_plan(s);
  CHECK(pairs_over(p, Transport::nccl) == std::vector<std::string>{"0-2", "0-3", "1-2", "1-3"});
  CHECK_FALSE(scenario_fabric_plan(parse_scenario(scenario_text(4, ""), "t.yaml")).any_nccl());
  CHECK(pairs_over(scenario_fabric_plan(parse_scenario(scenario_text(2, "fabric: nccl\n"), "t.yaml")),
                   Transport::nccl) == std::vector<std::string>{"0-1"});
}

TEST_CASE("acknowledgements answer their messages") {
  CHECK(acknowledged(Bell::released) == Bell::window);
  CHECK(acknowledged(Bell::consumed) == Bell::returned);
  CHECK(acknowledged(Bell::halo_read) == Bell::halo);
  CHECK(acknowledged(Bell::state_read) == Bell::state);
  CHECK_THROWS_AS(acknowledged(Bell::window), Error);
}

namespace {

SlabLayout tiny_kda_layout(int cp) { return slab_layout_with_kda(cp, 64, 4, 32, 16, 48, 32, 256, 2, 128); }

void check_disjoint_and_inside(const SlabLayout& L) {
  std::vector<std::pair<std::string, Region>> r = L.regions();
  std::sort(r.begin(), r.end(), [](const auto& a, const auto& b) { return a.second.offset < b.second.offset; });
  for (size_t i = 0; i < r.size(); ++i) {
    CAPTURE(r[i].first);
    CHECK(r[i].second.offset % kSlabAlign == 0);
    CHECK(r[i].second.end() <= L.total_bytes);
    if (i > 0) CHECK(r[i - 1].second.end() <= r[i].second.offset);
  }
}

}  // namespace

TEST_CASE("NCCL staging: inboxes for what a rank reads, outboxes for what it delivers; shared offsets kept") {
  const int cp = 4;
  const SlabLayout shared = tiny_kda_layout(cp);
  for (int rank = 0; rank < cp; ++rank) {
    CAPTURE(rank);
    std::vector<bool> peers(cp, true);
    peers[size_t(rank)] = false;
    const SlabLayout L = with_nccl_staging(shared, rank, peers);
    // Shared regions where they were: IPC peers address them with their own layout.
    CHECK(L.shared_bytes == shared.total_bytes);
    CHECK(L.kv.offset == shared.kv.offset);
    CHECK(L.q.offset == shared.q.offset);
    CHECK(L.M[1].offset == shared.M[1].offset);
    CHECK(L.total_bytes > shared.total_bytes);
    CHECK(L.bells_out.bytes == int64_t(L.n_doorbells()) * 8);
    check_disjoint_and_inside(L);
    for (int k = 0; k < cp; ++k) {
      CAPTURE(k);
      const bool keys = k < rank;  // read under the prefix schedule, kept ones under the stripe
      CHECK((L.in_kv[size_t(k)].bytes > 0) == keys);
      CHECK((L.in_M[size_t(k)].bytes > 0) == keys);
      // The owners it helps: under the stripe, and under balance its odd neighbour (cp 4 is even).
      const std::vector<int> owners = helped(cp, rank);
      const bool stripe_helps = std::find(owners.begin(), owners.end(), k) != owners.end();
      const bool balance_helps = rank % 2 == 0 && k == rank + 1;
      const bool helps = stripe_helps || balance_helps;
      CHECK((L.in_q[size_t(k)].bytes > 0) == helps);
      if (keys) {
        CHECK(L.inbox(k, L.kv).offset == L.in_kv[size_t(k)].offset);
        CHECK(L.inbox(k, L.M[0]).offset == L.in_M[size_t(k)].offset);
        CHECK(L.inbox(k, L.D[1]).offset == L.in_D[size_t(k)].offset);
        CHECK(L.in_kv[size_t(k)].bytes == L.kv.bytes);
      } else {
        CHECK_THROWS_AS(L.inbox(k, L.kv), Error);
      }
      if (helps) {
        const int slot = stripe_helps ? (k - rank) / 2 - 1 : balance_slot(cp);
        CHECK(L.inbox(k, L.q).bytes == L.q.bytes);
        for (int s = 0; s < 2; ++s) {
          CHECK(L.outbox(L.o[s][size_t(slot)]).offset == L.out_o[s][size_t(slot)].offset);
          CHECK(L.outbox(L.lse[s][size_t(slot)]).bytes == L.lse[s][size_t(slot)].bytes);
        }
      }
    }
    CHECK((L.out_halo[0].bytes > 0) == (rank + 1 < cp));
    if (rank + 1 < cp) CHECK(L.outbox(L.halo[1]).offset == L.out_halo[1].offset);
    CHECK_THROWS_AS(L.inbox(0, L.doorbells), Error);
    CHECK_THROWS_AS(L.outbox(L.kv), Error);
  }
}

TEST_CASE("NCCL staging only for NCCL peers; none without; a rank never reaches itself over NCCL") {
  const SlabLayout shared = tiny_kda_layout(4);
  const SlabLayout none = with_nccl_staging(shared, 2, {false, false, false, false});
  CHECK(none.total_bytes == shared.total_bytes);
  CHECK(none.regions().size() == shared.regions().size());
  // Rank 2 under 2 emulated hosts x 2: its NCCL peers are 0 and 1 (reads their keys and packages).
  const SlabLayout L = with_nccl_staging(shared, 2, {true, true, false, false});
  CHECK(L.in_kv[0].bytes > 0);
  CHECK(L.in_kv[1].bytes > 0);
  CHECK(L.in_q[0].bytes == 0);  // rank 2 helps only rank 3 at cp 4 (balance), over IPC
  CHECK(L.in_q[3].bytes == 0);
  CHECK(L.out_halo[0].bytes == 0);  // rank 3 is over IPC
  check_disjoint_and_inside(L);
  // Rank 0 with rank 2 over NCCL: its queries arrive in an inbox, its returns leave from an outbox.
  const SlabLayout r0 = with_nccl_staging(shared, 0, {false, false, true, false});
  CHECK(r0.in_q[2].bytes == shared.q.bytes);
  CHECK(r0.out_o[0][0].bytes == shared.o[0][0].bytes);
  CHECK(r0.in_q[1].bytes == 0);  // balance's owner, rank 1, is over IPC
  CHECK(r0.out_o[0][size_t(balance_slot(4))].bytes == 0);
  // Rank 0 with rank 1 over NCCL: balance's half window of queries arrives, its return leaves from balance's slot.
  const SlabLayout r0b = with_nccl_staging(shared, 0, {false, true, false, false});
  CHECK(r0b.in_q[1].bytes == shared.q.bytes);
  CHECK(r0b.out_o[1][size_t(balance_slot(4))].bytes == shared.o[1][size_t(balance_slot(4))].bytes);
  CHECK(r0b.out_o[1][0].bytes == 0);
  check_disjoint_and_inside(r0b);
  CHECK(r0.out_halo[0].bytes == 0);  // rank 1 is over IPC
  CHECK_THROWS_AS(with_nccl_staging(shared, 1, {false, true, false, false}), Error);
  CHECK_THROWS_AS(with_nccl_staging(shared, 1, {false, false}), Error);
  CHECK_THROWS_AS(with_nccl_staging(r0, 0, {false, false, true, false}), Error);  // staging twice
  // The MLA-only slab (lane): no package inboxes or halo outboxes.
  const SlabLayout mla = with_nccl_staging(slab_layout(4, 64, 4), 3, {true, true, true, false});
  CHECK(mla.in_M.empty());
  CHECK(mla.in_kv[2].bytes > 0);
  check_disjoint_and_inside(mla);
}
