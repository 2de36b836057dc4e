// AttnRes on the device: baseline == cut == reference bit for bit, for the
// scores and the output. The reference runs with the device's own rsqrtf and
// expf (evaluate_with_device_math), so every other rounding of the contract is
// checked exactly. Covers nb = 1 .. 8, row counts 1, 3, 17, 130, hidden 7168,
// 1024 and the edges of the cut (8, 2056, 8192), snapshot strides other than 8,
// several seeds, a mixture of scales per candidate (and the snapshot blocks
// past nb filled with NaN, so reading one shows). Outputs are poisoned before
// each run and guarded on both sides; the launch counts are taken from a
// captured graph. Row counts around multiples of the SM count drive the cut's
// grid-stride loop (several rows per block, the next row staged while one is
// mixed).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attnres.h"
#include "gpu_test.h"

using namespace pb;
using namespace pb::test;

namespace {

using bf16 = __nv_bfloat16;

constexpr float kEps = 1e-5f;
constexpr size_t kGuard = 64;  // poisoned elements on each side of an output

template <class T, class H>
DeviceBuffer<T> to_device(const std::vector<H>& host) {
  DeviceBuffer<T> d(host.size());
  d.upload(host);
  return d;
}

// A poisoned output of n elements of T between two poisoned guards.
template <class T>
struct GuardedOutput {
  DeviceBuffer<T> buf;
  size_t n;
  explicit GuardedOutput(size_t n_) : buf(kGuard + n_ + kGuard), n(n_) { buf.poison(); }
  T* get() const { return buf.get() + kGuard; }
  template <class H>
  std::vector<H> result(const char* what, Variant v) const {
    PB_CUDA(cudaDeviceSynchronize());
    const std::vector<H> all = buf.template download<H>();
    bool intact = true;
    for (size_t i = 0; i < all.size(); ++i) {
      if (i >= kGuard && i < kGuard + n) continue;
      H poison;
      std::memset(&poison, 0xff, sizeof poison);
      intact &= std::memcmp(&all[i], &poison, sizeof(H)) == 0;
    }
    CHECK_MESSAGE(intact, variant_name(v), ": store outside ", what);
    return std::vector<H>(all.begin() + kGuard, all.begin() + kGuard + n);
  }
};

// Score weights N(0, 1.5 / sqrt(hidden)): the scores of a row spread by ~1.5,
// so the softmax is neither one-hot nor flat.
std::vector<float> random_sw(int64_t hidden, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.5f / std::sqrt(float(hidden)));
  std::vector<float> w(static_cast<size_t>(hidden));
  for (auto& x : w) x = normal(rng);
  return w;
}

struct Case {
  int64_t rows, hidden;
  int nb;
  int64_t snap_blocks = 8;
  uint64_t seed = 1;
  bool zero_rows = false;  // make some candidates exactly zero (eps alone keeps the norm finite)
};

struct Inputs {
  AttnResShape shape;
  std::vector<uint16_t> snap, partial;
  std::vector<float> sw;
};

Inputs make_inputs(const Case& k) {
  // A mixture of scales: block b of every row and the partial each at its own.
  static const float kScales[] = {1.0f, 0.001f, 30.0f, 4.0f, 0.05f, 1000.0f, 0.5f, 8.0f, 2.0f};
  Inputs in;
  in.shape = {k.rows, k.hidden, k.nb, k.snap_blocks};
  const size_t row_n = size_t(k.hidden);
  in.snap.assign(size_t(k.rows * k.snap_blocks) * row_n, uint16_t(0xffff));  // NaN past nb
  for (int64_t r = 0; r < k.rows; ++r)
    for (int b = 0; b < k.nb; ++b) {
      const auto block = random_bf16(row_n, k.seed * 100003 + uint64_t(r * 8 + b), kScales[(b + k.seed) % 9]);
      std::memcpy(&in.snap[size_t(r * k.snap_blocks + b) * row_n], block.data(), row_n * 2);
    }
  in.partial = random_bf16(size_t(k.rows) * row_n, k.seed * 100003 + 77777, kScales[(8 + k.seed) % 9]);
  in.sw = random_sw(k.hidden, k.seed + 5);
  if (k.zero_rows) {
    for (int64_t r = 0; r < k.rows; r += 2)  // B_0 of even rows, P of rows 1 mod 3
      std::fill_n(&in.snap[size_t(r * k.snap_blocks) * row_n], row_n, uint16_t(r % 4 ? 0 : 0x8000));
    for (int64_t r = 1; r < k.rows; r += 3) std::fill_n(&in.partial[size_t(r) * row_n], row_n, uint16_t(0));
  }
  return in;
}

struct Outputs {
  std::vector<float> scores;
  std::vector<uint16_t> out;
};

void check_same(const Outputs& got, const Outputs& want, const char* what) {
  std::string report;
  CHECK_MESSAGE(first_bit_mismatch(got.scores, want.scores, &report) == -1, what, " scores: ", report);
  CHECK_MESSAGE(first_bit_mismatch(got.out, want.out, &report) == -1, what, " out: ", report);
}

// How many rows have a softmax whose largest weight is below 0.95.
int spread_rows(const Inputs& in, const std::vector<float>& scores) {
  ref::HostMath m;
  const int cands = in.shape.nb + 1;
  int spread = 0;
  for (int64_t r = 0; r < in.shape.rows; ++r) {
    float p[kAttnResMaxBlocks + 1];
    ref::attnres_softmax(&scores[size_t(r * cands)], cands, p, m);
    float pmax = 0;
    for (int c = 0; c < cands; ++c) pmax = std::max(pmax, p[c]);
    spread += pmax < 0.95f;
  }
  return spread;
}

void check_case(const Case& k) {
  INFO("rows ", k.rows, " hidden ", k.hidden, " nb ", k.nb, " snap_blocks ", k.snap_blocks, " seed ", k.seed,
       k.zero_rows ? " (zero rows)" : "");
  const Inputs in = make_inputs(k);
  const int cands = k.nb + 1;
  const size_t n_scores = size_t(k.rows * cands), n_out = size_t(k.rows * k.hidden);

  const Outputs want = evaluate_with_device_math([&](const ref::Transcendentals& m) {
    Outputs o{std::vector<float>(n_scores), std::vector<uint16_t>(n_out)};
    ref::attnres(in.snap.data(), in.partial.data(), in.sw.data(), o.scores.data(), o.out.data(), in.shape, kEps,
                 m);
    return o;
  });
  if (k.rows >= 17 && k.nb >= 2) CHECK(spread_rows(in, want.scores) >= k.rows / 4);

  const DeviceBuffer<bf16> d_snap = to_device<bf16>(in.snap);
  const DeviceBuffer<bf16> d_partial = to_device<bf16>(in.partial);
  const DeviceBuffer<float> d_sw = to_device<float>(in.sw);

  Outputs got[2];
  for (Variant v : {Variant::baseline, Variant::cut}) {
    GuardedOutput<float> scores(n_scores);
    GuardedOutput<bf16> out(n_out);
    attnres(v, d_snap.get(), d_partial.get(), d_sw.get(), scores.get(), out.get(), in.shape, kEps, nullptr);
    got[int(v)].scores = scores.result<float>("scores", v);
    got[int(v)].out = out.result<uint16_t>("out", v);
  }
  check_same(got[0], want, "baseline vs ref");
  check_same(got[1], want, "cut vs ref");
  check_same(got[1], got[0], "cut vs baseline");
}

int multiprocessors() {
  int dev = 0, sms = 0;
  PB_CUDA(cudaGetDevice(&dev));
  PB_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}

// Kernel nodes of one call captured into a graph.
int captured_kernels(Variant v, const bf16* snap, const bf16* partial, const float* sw, float* scores, bf16* out,
                     const AttnResShape& shape) {
  cudaStream_t s;
  PB_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t graph;
  PB_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  attnres(v, snap, partial, sw, scores, out, shape, kEps, s);
  PB_CUDA(cudaStreamEndCapture(s, &graph));
  size_t count = 0;
  PB_CUDA(cudaGraphGetNodes(graph, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  PB_CUDA(cudaGraphGetNodes(graph, nodes.data(), &count));
  int kernels = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    PB_CUDA(cudaGraphNodeGetType(node, &type));
    kernels += type == cudaGraphNodeTypeKernel;
  }
  PB_CUDA(cudaGraphDestroy(graph));
  PB_CUDA(cudaStreamDestroy(s));
  return kernels;
}

}  // namespace

TEST_CASE("attnres: bit-identical at hidden 7168, nb = 1 .. 8") {
  for (int nb = 1; nb <= 8; ++nb) {
    for (int64_t rows : {1, 3, 17}) check_case({rows, 7168, nb, 8, uint64_t(nb)});
    check_case({130, 7168, nb, 8, uint64_t(10 + nb)});
  }
  for (uint64_t seed : {21u, 22u}) check_case({17, 7168, 8, 8, seed});
}

TEST_CASE("attnres: bit-identical at hidden 1024, nb = 1 .. 8") {
  for (int nb = 1; nb <= 8; ++nb)
    for (int64_t rows : {1, 3, 17, 130})
      for (uint64_t seed : {1u, 2u}) check_case({rows, 1024, nb, 8, seed + uint64_t(nb) * 10});
}

TEST_CASE("attnres: the cut's edges of hidden (8, 2056, 8192) and snapshot strides") {
  // 8: one chunk, slot 0 alone; 2056: 257 chunks, slot 0 has two;
  // 8192: every slot holds 4 chunks, the cut's limit.
  for (int64_t hidden : {int64_t(8), int64_t(2056), int64_t(8192)})
    for (int nb : {1, 4, 8}) check_case({17, hidden, nb, 8, 3});
  check_case({17, 1024, 3, 3, 4});     // snap_blocks == nb
  check_case({17, 1024, 5, 11, 5});    // a wider stride than 8
  check_case({130, 7168, 8, 9, 6});
}

TEST_CASE("attnres: the cut's grid-stride loop over many rows (uneven row counts)") {
  // The cut runs ceil(rows / 2) blocks, 2 .. 4 per SM, each over rows b, b + G,
  // ...: row counts just around multiples of the SM count, and enough rows that
  // the blocks resident at once take several rows each, so the next row's chunks
  // are staged while a row is mixed, at every hidden and C.
  const int64_t sms = multiprocessors();
  INFO("multiprocessors ", sms);
  for (int64_t rows : {sms - 1, sms, sms + 1, 3 * sms + 5}) check_case({rows, 1024, 8, 8, 31});
  check_case({6 * sms + 7, 7168, 8, 8, 32});
  check_case({6 * sms + 3, 7168, 1, 8, 33});   // C = 2
  check_case({6 * sms + 1, 7168, 6, 8, 34});   // C = 7
  check_case({5 * sms + 2, 8192, 8, 8, 35});
  check_case({4 * sms + 9, 2056, 4, 8, 36});
  for (int nb : {1, 2, 3, 5, 7, 8}) check_case({40 * sms + 11, 8, nb, 8, uint64_t(40 + nb)});
  check_case({12 * sms + 5, 7168, 2, 8, 37});
  check_case({16 * sms + 3, 1024, 8, 8, 38});
  check_case({9 * sms + 7, 8192, 8, 8, 39});    // hidden 8192, C = 9: not all staged, the rest re-read from L2
}

TEST_CASE("attnres: zero candidates (the norm falls back on eps)") {
  for (int nb : {1, 2, 8}) {
    check_case({17, 7168, nb, 8, 7, true});
    check_case({17, 1024, nb, 8, 8, true});
  }
}

TEST_CASE("attnres: launches per call") {
  CHECK(attnres_launches(Variant::baseline) == 2);
  CHECK(attnres_launches(Variant::cut) == 1);
  const AttnResShape shape{3, 1024, 4, 8};
  DeviceBuffer<bf16> snap(3 * 8 * 1024), partial(3 * 1024), out(3 * 1024);
  DeviceBuffer<float> sw(1024), scores(3 * 5);
  for (Variant v : {Variant::baseline, Variant::cut}) {
    INFO(variant_name(v));
    CHECK(captured_kernels(v, snap.get(), partial.get(), sw.get(), scores.get(), out.get(), shape) ==
          attnres_launches(v));
  }
}

TEST_CASE("attnres: the launchers check their contract") {
  DeviceBuffer<bf16> snap(4 * 8 * 8200), partial(4 * 8200), out(4 * 8200);
  DeviceBuffer<float> sw(8200), scores(64);
  auto call = [&](Variant v, AttnResShape sh, const bf16* p = nullptr, bf16* o = nullptr, const float* w = nullptr,
                  float eps = kEps) {
    attnres(v, snap.get(), p ? p : partial.get(), w ? w : sw.get(), scores.get(), o ? o : out.get(), sh, eps,
            nullptr);
  };
  for (Variant v : {Variant::baseline, Variant::cut}) {
    INFO(variant_name(v));
    CHECK_THROWS_AS(call(v, {4, 1024, 0, 8}), pb::Error);      // nb < 1
    CHECK_THROWS_AS(call(v, {4, 1024, 9, 9}), pb::Error);      // nb > 8
    CHECK_THROWS_AS(call(v, {4, 1024, 4, 3}), pb::Error);      // snap_blocks < nb
    CHECK_THROWS_AS(call(v, {4, 1020, 4, 8}), pb::Error);      // hidden % 8 != 0
    CHECK_THROWS_AS(call(v, {-1, 1024, 4, 8}), pb::Error);     // rows < 0
    CHECK_THROWS_AS(call(v, {4, 1024, 4, 8}, nullptr, nullptr, nullptr, -1.0f), pb::Error);  // eps < 0
    CHECK_THROWS_AS(call(v, {4, 1024, 4, 8}, partial.get(), partial.get() + 8), pb::Error);  // out overlaps partial
    CHECK_THROWS_AS(call(v, {4, 1024, 4, 8}, partial.get(), snap.get() + 4096), pb::Error);  // out overlaps snap
    CHECK_THROWS_AS(attnres(v, nullptr, partial.get(), sw.get(), scores.get(), out.get(), {4, 1024, 4, 8}, kEps,
                            nullptr),
                    pb::Error);
    // rows == 0 launches nothing, even on null pointers
    CHECK_NOTHROW(attnres(v, nullptr, nullptr, nullptr, nullptr, nullptr, {0, 1024, 4, 8}, kEps, nullptr));
  }
  // the cut's own limits: hidden <= 8192 and 16-byte aligned pointers (the baseline takes both)
  CHECK_THROWS_AS(call(Variant::cut, {2, 8200, 2, 8}), pb::Error);
  CHECK_NOTHROW(call(Variant::baseline, {2, 8200, 2, 8}));
  CHECK_THROWS_AS(call(Variant::cut, {2, 1024, 2, 8}, partial.get() + 1), pb::Error);
  CHECK_THROWS_AS(call(Variant::cut, {2, 1024, 2, 8}, nullptr, out.get() + 1), pb::Error);
  CHECK_THROWS_AS(call(Variant::cut, {2, 1024, 2, 8}, nullptr, nullptr, sw.get() + 1), pb::Error);
  CHECK_NOTHROW(call(Variant::baseline, {2, 1024, 2, 8}, partial.get() + 1, out.get() + 1, sw.get() + 1));
  // attnres_cut called directly holds the same limits
  CHECK_THROWS_AS(attnres_cut(snap.get(), partial.get(), sw.get(), scores.get(), out.get(), {2, 8200, 2, 8}, kEps,
                              nullptr),
                  pb::Error);
  CHECK_THROWS_AS(attnres_cut(snap.get(), partial.get() + 1, sw.get(), scores.get(), out.get(), {2, 1024, 2, 8},
                              kEps, nullptr),
                  pb::Error);
  PB_CUDA(cudaDeviceSynchronize());
}
