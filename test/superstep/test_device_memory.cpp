// Device memory homes and budgets (harness/platform/device_memory.h), counted
// without a device: lanes, alignment, the GPU budget under each placement,
// and the superstep's needs at the full-size scenarios against the memory
// goals (cp8-128k in <= 130 GB and cp4-64k in <= 90 GB on one GPU, with each
// process's CUDA context and library workspaces on top).
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <string>

#include "device_memory.h"
#include "model.h"
#include "moe_gemm.h"
#include "scenario.h"
#include "superstep.h"

using namespace pb;

namespace {

constexpr int64_t kAlign = MemoryNeeds::kBufferAlign;
// What a process adds beyond the counted buffers (CUDA context, cuBLAS and
// cuDNN workspaces): the allowance the goals leave for it, per process.
constexpr double kProcessAllowance = 1.0e9;

Scenario load(const std::string& name, bool serialized) {
  ScenarioOverrides o;
  if (serialized) o.sets = {"serialize_ranks=true"};
  return load_scenario(std::string(PB_SOURCE_DIR) + "/scenarios/" + name + ".yaml", o);
}

}  // namespace

TEST_CASE("counting: homes, lanes and alignment") {
  DeviceMemory mem = DeviceMemory::counting();
  CHECK_FALSE(mem.fills_weights());
  mem.begin_block("a");
  DeviceBuffer<float> w = mem.take<float>("w", 10, Home::weights);
  DeviceBuffer<float> x = mem.take<float>("x", 100, Home::mixer);
  DeviceBuffer<float> y = mem.take<float>("y", 1000, Home::mixer);
  DeviceBuffer<float> r = mem.take<float>("r", 1, Home::rank);
  mem.begin_block("b");
  DeviceBuffer<float> z = mem.take<float>("z", 700, Home::mixer);
  DeviceBuffer<float> f = mem.take<float>("f", 64, Home::ffn);
  mem.note("own", 1000);
  // Counting hands out null views that know their sizes.
  CHECK(x.get() == nullptr);
  CHECK(y.size() == 1000);
  CHECK_FALSE(y.owns());
  const MemoryNeeds& n = mem.needs();
  CHECK(n.weights == kAlign);
  CHECK(n.rank == kAlign + 1024);  // 4 B and 1000 B, each rounded up
  // Block a's mixer buffers follow each other; block b's start over at 0.
  CHECK(n.lanes[int(Home::mixer) - int(Home::trunk)] == 512 + 4096);
  CHECK(n.lanes[int(Home::ffn) - int(Home::trunk)] == 256);
  CHECK(n.lanes[0] == 0);
  CHECK(n.turn_local == 512 + 4096 + 2816 + 256);
  CHECK(n.buffers.size() == 7);
}

TEST_CASE("the GPU budget under each placement") {
  MemoryNeeds a, b;
  a.weights = b.weights = 100;
  a.rank = 10;
  b.rank = 20;
  a.lanes = {1, 2, 3};
  b.lanes = {3, 2, 1};
  a.turn_local = 6;
  b.turn_local = 7;
  const GpuBudget alone = gpu_budget({a, b}, Placement{2, false});  // weights shared, arena not
  CHECK(alone.weights == 100);
  CHECK(alone.arena == 13);
  CHECK(alone.ranks == 30);
  const GpuBudget shared = gpu_budget({a, b}, Placement{2, true});
  CHECK(shared.arena == 3 + 2 + 3);  // the largest of each lane
  const GpuBudget one = gpu_budget({a}, Placement{1, true});  // one rank per GPU owns everything
  CHECK(one.weights == 100);
  CHECK(one.arena == 6);
}

TEST_CASE("the superstep's needs: every buffer named once per block, the same weights on every rank") {
  const Scenario s = load("cp8-128k", true);
  const Placement p{8, true};
  const MemoryNeeds first = Superstep::memory_needs(s, 0, p);
  const MemoryNeeds last = Superstep::memory_needs(s, 7, p);
  // Ranks that share weights take the same set in the same order (the lm head included).
  CHECK(first.weights == last.weights);
  std::set<std::string> names;
  for (const BufferNeed& b : first.buffers) {
    CHECK(b.bytes >= 0);
    CHECK_MESSAGE(names.insert(b.block + "." + b.name).second, "taken twice: " << b.block << "." << b.name);
  }
  // At K3 the weights are ~21.5 GB of bf16, the experts 15 GB of it.
  CHECK(first.weights > 20.0e9);
  CHECK(first.weights < 24.0e9);
  // Without sharing only the last rank holds the lm head.
  CHECK(Superstep::memory_needs(s, 0, Placement{}).weights < Superstep::memory_needs(s, 7, Placement{}).weights);
}

TEST_CASE("memory goals on one H200: cp8-128k <= 130 GB, cp4-64k <= 90 GB") {
  for (const auto& [name, ranks, goal] : {std::tuple{"cp8-128k", 8, 130e9}, std::tuple{"cp4-64k", 4, 90e9}}) {
    const Scenario s = load(name, true);
    const MemoryBudget b = superstep_memory_budget(s, Placement{ranks, true});
    const double total = double(b.fullest.total()) + ranks * kProcessAllowance;
    CHECK_MESSAGE(total <= goal, b.table);
    // The same scenario with a rank per GPU: every rank holds everything, as before.
    const MemoryBudget alone = superstep_memory_budget(s, Placement{1, false});
    CHECK(alone.fullest.total() > 55e9);
  }
}

TEST_CASE("the weights by precision: fp8 about half of bf16, fp4 experts (NVFP4, sized only) a quarter of theirs") {
  const auto weights = [](const char* precision) {
    ScenarioOverrides o;
    o.sets = {"serialize_ranks=true", std::string("precision=") + precision};
    const Scenario s = load_scenario(std::string(PB_SOURCE_DIR) + "/scenarios/cp8-128k.yaml", o);
    return double(Superstep::memory_needs(s, 0, Placement{8, true}).weights);
  };
  const double bf16 = weights("bf16"), fp8 = weights("fp8"), fp4 = weights("fp4");
  // fp8 halves every weight GEMM's weights (the router, kv_b and the lm head stay
  // bf16). fp4 takes the routed experts' gate|up and down (E x 3 x inter x latent
  // elements, one set for the synthetic layers) from a byte and the f32 128x128
  // block scales to half a byte and an e4m3 scale per 16.
  CHECK(fp8 < 0.66 * bf16);
  const ModelShape m = model_preset("k3");
  const double experts = double(m.experts) * 3.0 * double(m.expert_inter) * double(m.moe_latent);
  CHECK(fp8 - fp4 == doctest::Approx(experts * ((1.0 + 4.0 / (128.0 * 128.0)) - (0.5 + 1.0 / 16.0))).epsilon(0.01));
}

TEST_CASE("buffer labels: <block>.<name>; a weight by its own name and home; each label once") {
  CHECK(buffer_label("kda", "normed", Home::mixer) == "kda.normed");
  CHECK(buffer_label("kda", "moe.router", Home::weights) == "moe.router (weights)");
  const Scenario s = load("cp4-64k", true);
  std::set<std::string> labels;
  for (const BufferNeed& b : Superstep::memory_needs(s, 0, Placement{4, true}).buffers) {
    const std::string label = buffer_label(b.block, b.name, b.home);
    CHECK_MESSAGE(labels.insert(label).second, "label twice: " << label);
  }
}

TEST_CASE("the fp8 experts on the loop engine: its slack rows and scale blocks planned, other runs unchanged") {
  const auto needs = [](const std::string& engine, const char* precision) {
    ScenarioOverrides o;
    o.sets = {"serialize_ranks=true", std::string("precision=") + precision, "moe_gemm=" + engine};
    const Scenario s = load_scenario(std::string(PB_SOURCE_DIR) + "/scenarios/cp8-128k.yaml", o);
    std::map<std::string, int64_t> by_name;
    for (const BufferNeed& b : Superstep::memory_needs(s, 0, Placement{8, true}).buffers)
      by_name[buffer_label(b.block, b.name, b.home)] = b.bytes;
    return by_name;
  };
  const auto loop = needs("loop", "fp8"), cutlass = needs("cutlass", "fp8");
  const ModelShape m = model_preset("k3");
  const int64_t routed = 16384 * m.top_k, slack = kMoeFp8LoopSlackRows;  // cp8-128k: 16384 tokens a rank
  const int64_t kb = std::max(m.moe_latent, m.expert_inter) / 128;
  REQUIRE(loop.count("moe.expert_scale_blocks"));
  CHECK(loop.at("moe.expert_scale_blocks") == moe_fp8_loop_scale_floats(routed, int(m.experts), kb) * 4);
  CHECK(cutlass.count("moe.expert_scale_blocks") == 0);
  CHECK(loop.at("moe.permuted_e4m3") - cutlass.at("moe.permuted_e4m3") == slack * m.moe_latent);
  CHECK(loop.at("moe.expert_act_e4m3") - cutlass.at("moe.expert_act_e4m3") == slack * m.expert_inter);
  CHECK(loop.at("moe.expert_down") - cutlass.at("moe.expert_down") == slack * m.moe_latent * 2);
  CHECK(loop.at("moe.expert_gate") - cutlass.at("moe.expert_gate") == slack * m.expert_inter * 2);
  CHECK(needs("loop", "bf16") == needs("cutlass", "bf16"));  // bf16 experts: the loop engine takes nothing more
  // Widths the engine cannot take are refused before anything is allocated (it also needs a device: on
  // the CPU the width is what it names).
  ScenarioOverrides o;
  o.sets = {"moe_gemm=loop", "precision={gemm: bf16, experts: fp8}"};  // on the CPU, fp8 dense GEMMs are refused first
  const Scenario tiny = load_scenario(std::string(PB_SOURCE_DIR) + "/scenarios/smoke-fp8.yaml", o);
  CHECK(precision_device_problem(tiny).find("multiples of 512 (cuBLASLt's weight scale rows, moe_gemm.h), got 256 "
                                            "and 128; allowed: moe_gemm cutlass") != std::string::npos);
}
