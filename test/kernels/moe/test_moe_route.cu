// MoE routing on the device (kernels/moe/moe_route.h): router_topk,
// moe_permute_plan, moe_permute, moe_weight and moe_combine against their C++
// references, bit for bit. The router reference runs with the device's own
// expf (evaluate_with_device_math), so ids and weights compare exactly: same
// f32 expression, same order. Shapes: T = 1, 3, 257 (and plan tiles at and
// around 1024 assignments, 16384 tokens, more than 65535 rows), E = 224 and 8
// (and 33, 1024), k = 16 and 2 (and 5, 32). Logits carry exact ties, NaN and
// +-inf; ids carry duplicates and out-of-range (dropped) experts. Every output
// is poisoned before each run and guarded after its end (and before it where
// the pointer is shifted), so a missed or stray store shows up.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu_test.h"
#include "guarded.h"
#include "moe_route.h"

using namespace pb;
using namespace pb::test;

namespace {

using bf16 = __nv_bfloat16;

constexpr int kPoisonF = 0xff;  // bf16 / f32 outputs: NaN
constexpr int kPoisonI = 0x7b;  // int32 outputs: 0x7b7b7b7b, never a valid row or id

int64_t first_mismatch(const std::vector<int32_t>& got, const std::vector<int32_t>& want,
                       std::string* report) {
  if (got.size() != want.size()) {
    *report = "sizes differ";
    return 0;
  }
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i]) {
      *report = "index " + std::to_string(i) + ": got " + std::to_string(got[i]) + ", want " +
                std::to_string(want[i]);
      return int64_t(i);
    }
  return -1;
}

#define CHECK_SAME(got, want, what)                                                    \
  do {                                                                                 \
    std::string report_;                                                               \
    CHECK_MESSAGE(first_mismatch_any(got, want, &report_) == -1, what, ": ", report_); \
  } while (0)

int64_t first_mismatch_any(const std::vector<int32_t>& g, const std::vector<int32_t>& w,
                           std::string* r) {
  return first_mismatch(g, w, r);
}
int64_t first_mismatch_any(const std::vector<float>& g, const std::vector<float>& w,
                           std::string* r) {
  return first_bit_mismatch(g, w, r);
}
int64_t first_mismatch_any(const std::vector<uint16_t>& g, const std::vector<uint16_t>& w,
                           std::string* r) {
  return first_bit_mismatch(g, w, r);
}

std::string describe(const MoeRouteShape& s) {
  return "T " + std::to_string(s.tokens) + " E " + std::to_string(s.experts) + " k " +
         std::to_string(s.top_k);
}

size_t assignments(const MoeRouteShape& s) { return size_t(s.tokens) * size_t(s.top_k); }

// ---- inputs ----

enum class Logits { random, synthetic, ties };

const char* logits_name(Logits kind) {
  return kind == Logits::random ? "random" : kind == Logits::synthetic ? "synthetic" : "ties";
}

struct RouterInput {
  std::vector<float> logits, bias;
};

RouterInput router_input(Logits kind, const MoeRouteShape& s, uint64_t seed) {
  const size_t n = size_t(s.tokens) * size_t(s.experts);
  RouterInput in;
  if (kind == Logits::synthetic) {
    in.logits = synthetic_router_logits(s.tokens, s.experts, seed);
    in.bias = synthetic_router_bias(s.experts, seed);
  } else if (kind == Logits::random) {
    // N(0, 2) with -0, +0 and huge magnitudes (sigmoid exactly 0 or 1), plus
    // NaN and +-inf sprinkled in.
    in.logits = random_f32(n, seed, 2.0f);
    for (size_t i = 0; i < n; ++i) {
      if (i % 97 == 5) in.logits[i] = NAN;
      if (i % 89 == 7) in.logits[i] = INFINITY;
      if (i % 83 == 11) in.logits[i] = -INFINITY;
    }
    in.bias = random_f32(size_t(s.experts), seed + 1000, 0.05f);
  } else {
    // sigmoid exactly 0.5, 1 or 0, biases on a 1/4 grid: equal b everywhere.
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int> pick(0, 2), quarter(0, 4);
    const float exact[3] = {0.0f, 100.0f, -200.0f};
    in.logits.resize(n);
    for (float& v : in.logits) v = exact[pick(rng)];
    in.bias.resize(size_t(s.experts));
    for (float& v : in.bias) v = 0.25f * float(quarter(rng));
  }
  return in;
}

// ids [T, k] with duplicates within a token and ~6% out-of-range experts.
std::vector<int32_t> random_ids(const MoeRouteShape& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> pick(-2, s.experts + 1);
  std::vector<int32_t> ids(assignments(s));
  for (auto& v : ids) v = pick(rng);
  return ids;
}

// ---- the references ----

struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

Routed ref_router(const RouterInput& in, const MoeRouteShape& s) {
  return evaluate_with_device_math([&](const ref::Transcendentals& m) {
    Routed r{std::vector<int32_t>(assignments(s)), std::vector<float>(assignments(s))};
    ref::router_topk(in.logits.data(), in.bias.data(), r.ids.data(), r.weights.data(), s, m);
    return r;
  });
}

struct HostPlan {
  std::vector<int32_t> counts, offsets, perm_src, perm_dst;
};

HostPlan ref_plan(const std::vector<int32_t>& ids, const MoeRouteShape& s) {
  HostPlan p{std::vector<int32_t>(size_t(s.experts)), std::vector<int32_t>(size_t(s.experts) + 1),
             std::vector<int32_t>(assignments(s)), std::vector<int32_t>(assignments(s))};
  ref::moe_permute_plan(
      ids.data(), {p.counts.data(), p.offsets.data(), p.perm_src.data(), p.perm_dst.data()}, s);
  return p;
}

// ---- the device runs ----

Routed device_router(const RouterInput& in, const MoeRouteShape& s) {
  const auto logits = to_device<float>(in.logits);
  const auto bias = to_device<float>(in.bias);
  Guarded<int32_t> ids(assignments(s), kPoisonI);
  Guarded<float> weights(assignments(s), kPoisonF);
  router_topk(logits.get(), bias.get(), ids.get(), weights.get(), s, nullptr);
  return {ids.result("router ids"), weights.result("router weights")};
}

HostPlan device_plan(const std::vector<int32_t>& ids_host, const MoeRouteShape& s) {
  const auto ids = to_device<int32_t>(ids_host);
  Guarded<int32_t> counts(size_t(s.experts), kPoisonI), offsets(size_t(s.experts) + 1, kPoisonI);
  Guarded<int32_t> perm_src(assignments(s), kPoisonI), perm_dst(assignments(s), kPoisonI);
  const size_t ws_bytes = moe_permute_plan_workspace_bytes(s);
  Guarded<unsigned char> ws(ws_bytes, kPoisonI);  // the plan may not rely on a zeroed workspace
  moe_permute_plan(ids.get(), {counts.get(), offsets.get(), perm_src.get(), perm_dst.get()},
                   ws.get(), ws_bytes, s, nullptr);
  return {counts.result("plan counts"), offsets.result("plan offsets"), perm_src.result("perm_src"),
          perm_dst.result("perm_dst")};
}

void check_plan(const std::vector<int32_t>& ids, const MoeRouteShape& s) {
  const HostPlan want = ref_plan(ids, s);
  const HostPlan got = device_plan(ids, s);
  CHECK_SAME(got.counts, want.counts, "counts");
  CHECK_SAME(got.offsets, want.offsets, "offsets");
  CHECK_SAME(got.perm_src, want.perm_src, "perm_src");
  CHECK_SAME(got.perm_dst, want.perm_dst, "perm_dst");
}

// The three row kernels on one plan, widths W (latent) and N (intermediate);
// shift moves the bf16 input or output pointers off 16-byte alignment.
struct RowCase {
  int64_t W, N;
  size_t in_shift = 0, out_shift = 0;
  bool in_place_weight = false;
};

void check_rows(const HostPlan& plan, const std::vector<float>& weights, const MoeRouteShape& s,
                const RowCase& rc, uint64_t seed) {
  INFO("W " << rc.W << " N " << rc.N << " in_shift " << rc.in_shift << " out_shift " << rc.out_shift
            << " in_place " << rc.in_place_weight << " seed " << seed);
  const size_t A = assignments(s), T = size_t(s.tokens);
  const auto x = random_bf16(rc.in_shift + T * rc.W, seed);
  const auto y = random_bf16(rc.in_shift + A * rc.N, seed + 1);
  const auto yd = random_bf16(rc.in_shift + A * rc.W, seed + 2);
  const auto d_x = to_device<bf16>(x), d_y = to_device<bf16>(y), d_yd = to_device<bf16>(yd);
  const auto d_src = to_device<int32_t>(plan.perm_src), d_dst = to_device<int32_t>(plan.perm_dst);
  const auto d_w = to_device<float>(weights);

  std::vector<uint16_t> want_xp(A * rc.W), want_yw(A * rc.N), want_out(T * rc.W);
  ref::moe_permute(x.data() + rc.in_shift, plan.perm_src.data(), want_xp.data(), s, rc.W);
  ref::moe_weight(y.data() + rc.in_shift, plan.perm_src.data(), weights.data(), want_yw.data(), s,
                  rc.N);
  ref::moe_combine(yd.data() + rc.in_shift, plan.perm_dst.data(), want_out.data(), s, rc.W);

  Guarded<bf16, uint16_t> xp(A * rc.W, kPoisonF, rc.out_shift);
  moe_permute(d_x.get() + rc.in_shift, d_src.get(), xp.get(), s, rc.W, nullptr);
  CHECK_SAME(xp.result("moe_permute"), want_xp, "moe_permute");

  if (rc.in_place_weight) {
    auto io = to_device<bf16>(y);
    moe_weight(io.get() + rc.in_shift, d_src.get(), d_w.get(), io.get() + rc.in_shift, s, rc.N,
               nullptr);
    PB_CUDA(cudaDeviceSynchronize());
    const auto all = io.download<uint16_t>();
    CHECK_SAME(std::vector<uint16_t>(all.begin() + rc.in_shift, all.end()), want_yw,
               "moe_weight in place");
  } else {
    Guarded<bf16, uint16_t> yw(A * rc.N, kPoisonF, rc.out_shift);
    moe_weight(d_y.get() + rc.in_shift, d_src.get(), d_w.get(), yw.get(), s, rc.N, nullptr);
    CHECK_SAME(yw.result("moe_weight"), want_yw, "moe_weight");
  }

  Guarded<bf16, uint16_t> out(T * rc.W, kPoisonF, rc.out_shift);
  moe_combine(d_yd.get() + rc.in_shift, d_dst.get(), out.get(), s, rc.W, nullptr);
  CHECK_SAME(out.result("moe_combine"), want_out, "moe_combine");
}

const MoeRouteShape kShapes[] = {
    {1, 224, 16}, {3, 224, 16},  {257, 224, 16}, {1, 8, 2},   {3, 8, 2},
    {257, 8, 2},  {257, 224, 2}, {3, 1024, 32},  {40, 33, 5}, {64, 8, 8},
};

}  // namespace

TEST_CASE("moe_route: router -> plan -> permute -> weight -> combine, device == ref bit for bit") {
  for (const MoeRouteShape& s : kShapes)
    for (Logits kind : {Logits::random, Logits::synthetic, Logits::ties}) {
      const uint64_t seed = 17 + uint64_t(s.tokens) * 3 + uint64_t(s.experts);
      INFO(describe(s) << " logits " << logits_name(kind) << " seed " << seed);
      const RouterInput in = router_input(kind, s, seed);
      const Routed want = ref_router(in, s);
      const Routed got = device_router(in, s);
      CHECK_SAME(got.ids, want.ids, "router ids");
      CHECK_SAME(got.weights, want.weights, "router weights");

      // The plan on the device's own ids (equal to the reference's when the
      // router passed), then the row kernels on that plan.
      check_plan(got.ids, s);
      const HostPlan plan = ref_plan(want.ids, s);
      const bool k3 = s.experts == 224;  // K3 widths; the tiny preset's otherwise
      check_rows(plan, want.weights, s, {k3 ? 3584 : 256, k3 ? 3072 : 128}, seed);
    }
}

TEST_CASE("moe_permute_plan: tiles, duplicates, dropped ids, empty shapes") {
  SUBCASE("random ids with duplicates and out-of-range experts") {
    for (const MoeRouteShape& s :
         {MoeRouteShape{1, 224, 16}, MoeRouteShape{3, 8, 2}, MoeRouteShape{257, 224, 16},
          MoeRouteShape{64, 224, 16},  // exactly one tile (1024 assignments)
          MoeRouteShape{1025, 8, 1},   // one past a tile
          MoeRouteShape{4099, 33, 5},  // 21 tiles, the last partial
          MoeRouteShape{300, 1024, 32}}) {
      INFO(describe(s));
      check_plan(random_ids(s, 5 + uint64_t(s.tokens)), s);
    }
  }
  SUBCASE("16384 tokens through the skewed synthetic router (256 tiles)") {
    const MoeRouteShape s{16384, 224, 16};
    const RouterInput in = router_input(Logits::synthetic, s, 1);
    const Routed want = ref_router(in, s);
    const Routed got = device_router(in, s);
    CHECK_SAME(got.ids, want.ids, "router ids");
    CHECK_SAME(got.weights, want.weights, "router weights");
    check_plan(got.ids, s);
    const HostPlan plan = ref_plan(want.ids, s);
    MESSAGE("synthetic router at T 16384, E 224, k 16: load imbalance max/mean = ",
            moe_load_imbalance(plan.counts.data(), s.experts));
  }
  SUBCASE("every id out of range: nothing counted, perm_src all -1") {
    const MoeRouteShape s{100, 8, 2};
    check_plan(std::vector<int32_t>(assignments(s), 8), s);
    check_plan(std::vector<int32_t>(assignments(s), -1), s);
  }
  SUBCASE("T = 0 writes zero counts and offsets") {
    const MoeRouteShape s{0, 224, 16};
    Guarded<int32_t> counts(224, kPoisonI), offsets(225, kPoisonI);
    CHECK(moe_permute_plan_workspace_bytes(s) == 0);
    moe_permute_plan(nullptr, {counts.get(), offsets.get(), nullptr, nullptr}, nullptr, 0, s,
                     nullptr);
    CHECK_SAME(counts.result("counts"), std::vector<int32_t>(224, 0), "counts");
    CHECK_SAME(offsets.result("offsets"), std::vector<int32_t>(225, 0), "offsets");
  }
}

TEST_CASE("moe row kernels: vector and scalar paths, dropped rows, in place") {
  const MoeRouteShape s{257, 224, 16};
  std::vector<int32_t> ids = random_ids(s, 3);  // ~6% dropped: zero rows, skipped slots
  const HostPlan plan = ref_plan(ids, s);
  std::vector<float> weights = random_f32(assignments(s), 4, 0.5f);  // signs, -0, huge values
  for (const RowCase& rc : {RowCase{3584, 3072}, RowCase{24, 8}, RowCase{8, 16}, RowCase{13, 7},
                            RowCase{1, 1}, RowCase{64, 64, 1, 0}, RowCase{64, 64, 0, 1},
                            RowCase{64, 64, 0, 0, true}, RowCase{13, 13, 1, 1, true}})
    check_rows(plan, weights, s, rc, 21);
}

TEST_CASE("moe row kernels: more than 65535 rows and tokens (grid-stride)") {
  const MoeRouteShape big{70000, 8, 2};  // 140000 permuted rows, 70000 tokens
  const HostPlan p = ref_plan(random_ids(big, 8), big);
  check_rows(p, random_f32(assignments(big), 9), big, {8, 8}, 31);
}

TEST_CASE("moe_route launchers check their contract") {
  DeviceBuffer<float> f(4096);
  DeviceBuffer<int32_t> i(4096);
  DeviceBuffer<bf16> h(4096);
  const MoeRouteShape s{4, 8, 2}, k_over_e{4, 8, 9}, too_many_experts{4, 2048, 2}, empty{0, 8, 2};
  float* logits = f.get();
  float* bias = f.get() + 64;
  float* weights = f.get() + 128;
  CHECK_THROWS_AS(router_topk(logits, bias, i.get(), weights, k_over_e, nullptr), pb::Error);
  CHECK_THROWS_AS(router_topk(logits, bias, i.get(), weights, too_many_experts, nullptr),
                  pb::Error);
  CHECK_THROWS_AS(router_topk(nullptr, bias, i.get(), weights, s, nullptr), pb::Error);
  CHECK_THROWS_AS(router_topk(logits, bias, i.get(), logits + 8, s, nullptr),
                  pb::Error);  // on logits
  CHECK_NOTHROW(router_topk(nullptr, nullptr, nullptr, nullptr, empty, nullptr));

  const MoePlan plan{i.get() + 64, i.get() + 128, i.get() + 256, i.get() + 512};
  const MoePlan no_counts{nullptr, i.get() + 128, i.get() + 256, i.get() + 512};
  const size_t ws = moe_permute_plan_workspace_bytes(s);
  CHECK(ws == 8 * sizeof(int32_t));  // one tile of 8 experts
  CHECK_THROWS_AS(moe_permute_plan(i.get(), plan, f.get(), ws - 4, s, nullptr), pb::Error);
  CHECK_THROWS_AS(moe_permute_plan(i.get(), no_counts, f.get(), ws, s, nullptr), pb::Error);
  CHECK_THROWS_AS(moe_permute_plan(i.get() + 256, plan, f.get(), ws, s, nullptr),
                  pb::Error);  // ids on perm_src

  CHECK_THROWS_AS(moe_permute(h.get(), i.get(), h.get() + 16, s, 8, nullptr),
                  pb::Error);  // xp over x
  CHECK_THROWS_AS(moe_permute(h.get(), nullptr, h.get() + 1024, s, 8, nullptr), pb::Error);
  CHECK_THROWS_AS(moe_permute(h.get(), i.get(), h.get() + 1024, s, -1, nullptr), pb::Error);
  CHECK_NOTHROW(moe_permute(nullptr, nullptr, nullptr, s, 0, nullptr));
  CHECK_THROWS_AS(moe_weight(h.get(), i.get(), f.get(), h.get() + 8, s, 8, nullptr),
                  pb::Error);  // partial overlap
  CHECK_THROWS_AS(moe_combine(h.get(), i.get(), h.get() + 8, s, 8, nullptr), pb::Error);
  CHECK_THROWS_AS(moe_combine(h.get(), nullptr, h.get() + 1024, s, 8, nullptr), pb::Error);
  CHECK_NOTHROW(moe_combine(nullptr, nullptr, nullptr, empty, 8, nullptr));
  PB_CUDA(cudaDeviceSynchronize());
}
