// The cut kernels' benchmark. Each case allocates its inputs (rotated over
// enough copies to defeat L2), times baseline and cut with CUDA events, then
// validates: baseline and cut outputs of the same inputs must be bit-identical
// (the `wrong` column counts differing elements; the GPU tests hold both to the
// C++ reference). Bytes and FLOPs come from the one cost model (cost.h).
#include "kernels_bench.h"

#include <cuda_bf16.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <map>
#include <memory>

#include "attnres.h"
#include "check.h"
#include "conv_silu_chunk.h"
#include "cost.h"
#include "cuts.h"
#include "device_buffer.h"
#include "elementwise.h"
#include "fp8.h"
#include "land.h"
#include "lse_merge.h"
#include "model.h"
#include "quant.h"
#include "random_fill.h"
#include "rmsnorm.h"
#include "timing.h"

namespace pb {

namespace {

using bf16 = __nv_bfloat16;

// One benchmark case: how to launch a variant on rotation slot `slot`, and how
// to count the elements where baseline and cut disagree on slot 0.
struct Case {
  std::string family, tag, shape;
  Cost cost;
  Cost cut_cost;  // what the cut moves when it differs from cost (a fused cut); bytes 0: cost
  int slots = 2;
  std::function<void(Variant, int slot, cudaStream_t)> launch;
  std::function<int64_t(cudaStream_t)> count_wrong;  // baseline against cut
};

template <class T>
int64_t count_differing(const DeviceBuffer<T>& a, const DeviceBuffer<T>& b) {
  std::vector<T> ha = a.download(), hb = b.download();
  int64_t wrong = 0;
  for (size_t i = 0; i < ha.size(); ++i) wrong += std::memcmp(&ha[i], &hb[i], sizeof(T)) != 0;
  return wrong;
}

template <class T>
std::vector<DeviceBuffer<T>> random_slots(int slots, int64_t n, uint64_t seed, float scale, cudaStream_t s) {
  std::vector<DeviceBuffer<T>> v;
  for (int i = 0; i < slots; ++i) {
    v.emplace_back(size_t(n));
    if constexpr (sizeof(T) == 2) fill_uniform_bf16(v.back().get(), n, seed + i, scale, s);
    else fill_uniform_f32(v.back().get(), n, seed + i, scale, s);
  }
  return v;
}

// ---- land (cut 1): seed shapes n = 12288, 18432, and 33792 of 67584 ----
Case land_case(int64_t rows, int64_t nt, int64_t off, int64_t n, cudaStream_t s) {
  Case c;
  c.family = "land";
  c.tag = "land.n" + std::to_string(n);
  c.shape = fmt::format("{}x{} of {}", rows, n, nt);
  c.cost = cost::land(rows, 1, n);
  c.slots = rotation_slots(c.cost.bytes);
  auto p = std::make_shared<std::vector<DeviceBuffer<float>>>(random_slots<float>(c.slots, rows * nt, 11, 4.0f, s));
  auto out = std::make_shared<std::array<DeviceBuffer<bf16>, 2>>();
  (*out)[0] = DeviceBuffer<bf16>(rows * n);
  (*out)[1] = DeviceBuffer<bf16>(rows * n);
  LandShape shape{rows, 1, nt, off, n};
  c.launch = [=](Variant v, int slot, cudaStream_t st) { land(v, (*p)[slot].get(), (*out)[int(v)].get(), shape, st); };
  c.count_wrong = [=](cudaStream_t st) {
    for (Variant v : {Variant::baseline, Variant::cut}) {
      (*out)[int(v)].poison(st);
      land(v, (*p)[0].get(), (*out)[int(v)].get(), shape, st);
    }
    PB_CUDA(cudaStreamSynchronize(st));
    return count_differing((*out)[0], (*out)[1]);
  };
  return c;
}

// ---- conv_silu_chunk (cut 2): q, k and v at inner 12288, the full baseline path ----
Case conv_case(int64_t rows, int64_t inner, cudaStream_t s) {
  Case c;
  c.family = "conv";
  c.tag = "conv.qkv";
  c.shape = fmt::format("3 x {}x{}", rows, inner);
  Cost one = cost::conv_cut(rows, inner);
  c.cost = {3 * one.bytes, 3 * one.flops, Unit::memory};
  c.slots = rotation_slots(c.cost.bytes);
  const ConvShape shape{rows, inner, inner, rows};
  struct Buffers {
    std::vector<DeviceBuffer<float>> p;  // [slots * 3] partials
    DeviceBuffer<float> taps;
    DeviceBuffer<bf16> carry;
    std::array<DeviceBuffer<bf16>, 2> y, next;  // per variant, 3 streams each
    DeviceBuffer<char> scratch;
  };
  auto b = std::make_shared<Buffers>();
  b->p = random_slots<float>(c.slots * 3, rows * inner, 21, 3.0f, s);
  b->taps = DeviceBuffer<float>(3 * 4 * inner);
  fill_uniform_f32(b->taps.get(), 3 * 4 * inner, 22, 0.5f, s);
  b->carry = DeviceBuffer<bf16>(3 * 3 * inner);
  fill_uniform_bf16(b->carry.get(), 3 * 3 * inner, 23, 2.0f, s);
  for (int v = 0; v < 2; ++v) {
    b->y[v] = DeviceBuffer<bf16>(3 * rows * inner);
    b->next[v] = DeviceBuffer<bf16>(3 * 3 * inner);
  }
  b->scratch = DeviceBuffer<char>(conv_baseline_scratch_bytes(shape));
  c.launch = [=](Variant v, int slot, cudaStream_t st) {
    ConvBaselineScratch scratch = conv_baseline_scratch_from(b->scratch.get(), shape);
    for (int stream = 0; stream < 3; ++stream) {
      conv_silu_chunk(v, b->p[slot * 3 + stream].get(), b->taps.get() + stream * 4 * inner,
                      b->carry.get() + stream * 3 * inner, b->y[int(v)].get() + stream * rows * inner,
                      b->next[int(v)].get() + stream * 3 * inner, shape, scratch, Variant::baseline, st);
    }
  };
  c.count_wrong = [=](cudaStream_t st) {
    for (int v = 0; v < 2; ++v) {
      b->y[v].poison(st);
      b->next[v].poison(st);
    }
    c.launch(Variant::baseline, 0, st);
    c.launch(Variant::cut, 0, st);
    PB_CUDA(cudaStreamSynchronize(st));
    return count_differing(b->y[0], b->y[1]) + count_differing(b->next[0], b->next[1]);
  };
  return c;
}

// ---- lse_merge (cut 4): 16896 x 96 heads x 128 ----
Case merge_case(int64_t rows, int heads, cudaStream_t s) {
  Case c;
  c.family = "lse_merge";
  c.tag = "lse_merge";
  c.shape = fmt::format("{}x{}x128", rows, heads);
  c.cost = cost::lse_merge(rows, heads, 128);
  c.slots = rotation_slots(c.cost.bytes);
  const int64_t n = rows * heads * 128, nl = rows * heads;
  struct Buffers {
    std::vector<DeviceBuffer<bf16>> o;
    std::vector<DeviceBuffer<float>> lse, acc, lse_acc;
    std::array<DeviceBuffer<float>, 2> check_acc, check_lse;
  };
  auto b = std::make_shared<Buffers>();
  b->o = random_slots<bf16>(c.slots, n, 31, 2.0f, s);
  b->lse = random_slots<float>(c.slots, nl, 32, 8.0f, s);
  b->acc = random_slots<float>(c.slots, n, 33, 2.0f, s);
  b->lse_acc = random_slots<float>(c.slots, nl, 34, 8.0f, s);
  for (int v = 0; v < 2; ++v) {
    b->check_acc[v] = DeviceBuffer<float>(n);
    b->check_lse[v] = DeviceBuffer<float>(nl);
  }
  c.launch = [=](Variant v, int slot, cudaStream_t st) {
    lse_merge(v, b->o[slot].get(), b->lse[slot].get(), b->acc[slot].get(), b->lse_acc[slot].get(), rows, heads,
              false, st);
  };
  c.count_wrong = [=](cudaStream_t st) {
    for (Variant v : {Variant::baseline, Variant::cut}) {
      auto& acc = b->check_acc[int(v)];
      auto& lse = b->check_lse[int(v)];
      PB_CUDA(cudaMemcpyAsync(acc.get(), b->acc[0].get(), acc.bytes(), cudaMemcpyDeviceToDevice, st));
      PB_CUDA(cudaMemcpyAsync(lse.get(), b->lse_acc[0].get(), lse.bytes(), cudaMemcpyDeviceToDevice, st));
      lse_merge(v, b->o[0].get(), b->lse[0].get(), acc.get(), lse.get(), rows, heads, false, st);
    }
    PB_CUDA(cudaStreamSynchronize(st));
    return count_differing(b->check_acc[0], b->check_acc[1]) + count_differing(b->check_lse[0], b->check_lse[1]);
  };
  return c;
}

// ---- elementwise (cut 5): two-operand ops at [rows, width] ----
using BinaryOp = void (*)(Variant, const bf16*, const bf16*, bf16*, int64_t, cudaStream_t);

Case binary_case(const std::string& op, BinaryOp fn, double flops_per_element, int64_t rows, int64_t width,
                 cudaStream_t s) {
  Case c;
  c.family = "elementwise";
  c.tag = op + ".w" + std::to_string(width);
  c.shape = fmt::format("{}x{}", rows, width);
  const int64_t n = rows * width;
  c.cost = cost::elementwise(n, 2, flops_per_element);
  c.slots = rotation_slots(c.cost.bytes);
  struct Buffers {
    std::vector<DeviceBuffer<bf16>> a, b;
    std::array<DeviceBuffer<bf16>, 2> out;
  };
  auto b = std::make_shared<Buffers>();
  b->a = random_slots<bf16>(c.slots, n, 41, 6.0f, s);
  b->b = random_slots<bf16>(c.slots, n, 42, 6.0f, s);
  b->out[0] = DeviceBuffer<bf16>(n);
  b->out[1] = DeviceBuffer<bf16>(n);
  c.launch = [=](Variant v, int slot, cudaStream_t st) { fn(v, b->a[slot].get(), b->b[slot].get(), b->out[int(v)].get(), n, st); };
  c.count_wrong = [=](cudaStream_t st) {
    for (Variant v : {Variant::baseline, Variant::cut}) {
      b->out[int(v)].poison(st);
      fn(v, b->a[0].get(), b->b[0].get(), b->out[int(v)].get(), n, st);
    }
    PB_CUDA(cudaStreamSynchronize(st));
    return count_differing(b->out[0], b->out[1]);
  };
  return c;
}

Case o_norm_gate_case(int64_t rows, int heads, cudaStream_t s) {
  Case c;
  c.family = "elementwise";
  c.tag = "o_norm_gate";
  c.shape = fmt::format("{}x{}x128", rows, heads);
  const int64_t row_heads = rows * heads, n = row_heads * 128;
  c.cost = cost::o_norm_gate(row_heads, 128);
  c.slots = rotation_slots(c.cost.bytes);
  struct Buffers {
    std::vector<DeviceBuffer<bf16>> x, g;
    DeviceBuffer<float> gamma;
    std::array<DeviceBuffer<bf16>, 2> out;
  };
  auto b = std::make_shared<Buffers>();
  b->x = random_slots<bf16>(c.slots, n, 51, 3.0f, s);
  b->g = random_slots<bf16>(c.slots, n, 52, 6.0f, s);
  b->gamma = DeviceBuffer<float>(128);
  fill_uniform_f32(b->gamma.get(), 128, 53, 1.5f, s);
  b->out[0] = DeviceBuffer<bf16>(n);
  b->out[1] = DeviceBuffer<bf16>(n);
  c.launch = [=](Variant v, int slot, cudaStream_t st) {
    o_norm_gate(v, b->x[slot].get(), b->g[slot].get(), b->gamma.get(), b->out[int(v)].get(), row_heads, 1e-5f, st);
  };
  c.count_wrong = [=](cudaStream_t st) {
    for (Variant v : {Variant::baseline, Variant::cut}) {
      b->out[int(v)].poison(st);
      o_norm_gate(v, b->x[0].get(), b->g[0].get(), b->gamma.get(), b->out[int(v)].get(), row_heads, 1e-5f, st);
    }
    PB_CUDA(cudaStreamSynchronize(st));
    return count_differing(b->out[0], b->out[1]);
  };
  return c;
}

// ---- attnres (the sixth cut): one call at nb = 1 .. 8 over [rows, 8, hidden] snapshots ----
// Bytes: the baseline reads every candidate once per launch (scores + mix);
// the fused cut reads them once (cost::attnres_fused). Each row's TB/s and
// fraction count the bytes its own variant moves.
std::string attnres_tag(int nb) { return "attnres.nb" + std::to_string(nb); }

Case attnres_case(int64_t rows, int64_t hidden, int nb, cudaStream_t s) {
  Case c;
  c.family = "attnres";
  c.tag = attnres_tag(nb);
  c.shape = fmt::format("{}x{} c{}", rows, hidden, nb + 1);
  const Cost scores = cost::attnres_scores(rows, hidden, nb + 1), mix = cost::attnres_mix(rows, hidden, nb + 1);
  c.cost = {scores.bytes + mix.bytes, scores.flops + mix.flops, Unit::memory};
  c.cut_cost = cost::attnres_fused(rows, hidden, nb + 1);
  c.slots = rotation_slots(c.cut_cost.bytes);
  const AttnResShape shape{rows, hidden, nb, 8};
  struct Buffers {
    std::vector<DeviceBuffer<bf16>> snap, partial;  // [rows, 8, hidden], [rows, hidden] per slot
    DeviceBuffer<float> sw;
    std::array<DeviceBuffer<float>, 2> scores;  // baseline, cut
    std::array<DeviceBuffer<bf16>, 2> out;
  };
  auto b = std::make_shared<Buffers>();
  b->snap = random_slots<bf16>(c.slots, rows * 8 * hidden, 61, 3.0f, s);
  b->partial = random_slots<bf16>(c.slots, rows * hidden, 62, 3.0f, s);
  b->sw = DeviceBuffer<float>(hidden);
  fill_uniform_f32(b->sw.get(), hidden, 63, 0.02f, s);  // scores spread ~1: a softmax that is not one-hot
  for (int v = 0; v < 2; ++v) {
    b->scores[v] = DeviceBuffer<float>(rows * (nb + 1));
    b->out[v] = DeviceBuffer<bf16>(rows * hidden);
  }
  c.launch = [=](Variant v, int slot, cudaStream_t st) {
    attnres(v, b->snap[slot].get(), b->partial[slot].get(), b->sw.get(), b->scores[int(v)].get(),
            b->out[int(v)].get(), shape, 1e-5f, st);
  };
  c.count_wrong = [=](cudaStream_t st) {
    for (Variant v : {Variant::baseline, Variant::cut}) {
      b->scores[int(v)].poison(st);
      b->out[int(v)].poison(st);
      attnres(v, b->snap[0].get(), b->partial[0].get(), b->sw.get(), b->scores[int(v)].get(), b->out[int(v)].get(),
              shape, 1e-5f, st);
    }
    PB_CUDA(cudaStreamSynchronize(st));
    return count_differing(b->scores[0], b->scores[1]) + count_differing(b->out[0], b->out[1]);
  };
  return c;
}

// One superstep's AttnRes at K3 (docs/design.md §2.1, L = 93, a snapshot every 12
// layers): nb_in(l) for l = 1 .. 92 and nb_mlp(l) for l = 0 .. 92, 185 full-row
// calls, summed from the per-nb medians above; the first token's call on one
// row is left out. Prints nothing unless every nb was measured.
void print_attnres_superstep(int64_t rows, RunResult& result) {
  const ModelShape m = model_preset("k3");
  std::array<int, kAttnResMaxBlocks + 1> calls{};
  for (int64_t l = 0; l < m.layers; ++l) {
    for (int64_t nb : {l > 0 ? m.nb_in(l) : int64_t(0), m.nb_mlp(l)}) {
      if (nb == 0) continue;
      PB_CHECK(nb <= kAttnResMaxBlocks, "attnres superstep: nb above 8");
      ++calls[size_t(nb)];
    }
  }
  double us[2] = {0, 0}, bytes[2] = {0, 0};
  int total = 0;
  for (int nb = 1; nb <= kAttnResMaxBlocks; ++nb) {
    if (calls[size_t(nb)] == 0) continue;
    for (Variant v : {Variant::baseline, Variant::cut}) {
      const BenchRow* found = nullptr;
      for (const auto& row : result.bench)
        if (row.family == "attnres" && row.kernel == attnres_tag(nb) && row.variant == variant_name(v)) found = &row;
      if (!found) return;
      us[int(v)] += calls[size_t(nb)] * found->median_us;
      bytes[int(v)] += calls[size_t(nb)] * found->bytes;
    }
    total += calls[size_t(nb)];
  }
  std::printf("attnres superstep: %d calls at %lld rows (nb 1..8 x %d %d %d %d %d %d %d %d; the 1-row call not "
              "counted): baseline %.1f us (%.3f TB/s), cut %.1f us (%.3f TB/s), speedup %.2f\n",
              total, (long long)rows, calls[1], calls[2], calls[3], calls[4], calls[5], calls[6], calls[7], calls[8],
              us[0], bytes[0] / (us[0] * 1e6), us[1], bytes[1] / (us[1] * 1e6), us[0] / us[1]);
  result.numbers["attnres_superstep_baseline_us"] = us[0];
  result.numbers["attnres_superstep_cut_us"] = us[1];
  result.numbers["attnres_superstep_calls"] = total;
}

// The fp8 twins a quant case's baseline and cut write, MN-major scales.
struct Fp8Twins {
  std::array<DeviceBuffer<__nv_fp8_e4m3>, 2> codes;
  std::array<DeviceBuffer<float>, 2> scales;
  Fp8ScaleLayout layout;
  Fp8Twins(int64_t rows, int64_t width) : layout(act_scales_mn_major(act_scale_ld(rows))) {
    for (int i = 0; i < 2; ++i) {
      codes[size_t(i)] = DeviceBuffer<__nv_fp8_e4m3>(size_t(rows * width));
      scales[size_t(i)] = DeviceBuffer<float>(size_t(width / kFp8Group * act_scale_ld(rows)));
    }
  }
};

// Baseline and cut on slot 0 into poisoned twins: the codes and scales that differ.
int64_t count_twins_differing(Fp8Twins& t, const std::function<void(Variant, int, cudaStream_t)>& run,
                              cudaStream_t st) {
  for (Variant v : {Variant::baseline, Variant::cut}) {
    t.codes[size_t(v)].poison(st);
    t.scales[size_t(v)].poison(st);
    run(v, 0, st);
  }
  PB_CUDA(cudaStreamSynchronize(st));
  return count_differing(t.codes[0], t.codes[1]) + count_differing(t.scales[0], t.scales[1]);
}

// ---- quant (cut quant_fuse): the producer then quantize_act_fp8, against the
// producer that writes the fp8 rows itself. RMSNorm over [rows, 7168] (the
// mixers' and FFNs' inputs), situ over [rows, 6144] (the shared experts'),
// mul_sigmoid over [rows, 12288] (MLA's output gate) and o_norm_gate over 96
// heads (KDA's), none writing bf16 rows in the fused form.
Case quant_rmsnorm_case(int64_t rows, int64_t width, cudaStream_t s) {
  Case c;
  c.family = "quant";
  c.tag = "quant.rmsnorm.w" + std::to_string(width);
  c.shape = fmt::format("{}x{}", rows, width);
  c.cost = cost::rmsnorm(rows, width);
  const Cost q = cost::quant_act(rows, width);
  c.cost.bytes += q.bytes;
  c.cut_cost = cost::rmsnorm_fp8(rows, width, false);
  c.slots = rotation_slots(c.cost.bytes);
  const int64_t n = rows * width;
  struct Buffers : Fp8Twins {
    using Fp8Twins::Fp8Twins;
    std::vector<DeviceBuffer<bf16>> x;
    DeviceBuffer<bf16> normed;
  };
  auto b = std::make_shared<Buffers>(rows, width);
  b->x = random_slots<bf16>(c.slots, n, 61, 3.0f, s);
  b->normed = DeviceBuffer<bf16>(size_t(n));
  const float eps = float(kRmsNormEps);
  auto run = [=](Variant v, int slot, cudaStream_t st) {
    const size_t i = size_t(v);
    if (v == Variant::cut) {
      rmsnorm_fp8(b->x[slot].get(), nullptr, nullptr, b->codes[i].get(), b->scales[i].get(), b->layout,
                  {rows, width}, eps, st);
      return;
    }
    rmsnorm(b->x[slot].get(), nullptr, b->normed.get(), {rows, width}, eps, st);
    quantize_act_fp8(b->normed.get(), b->codes[i].get(), b->scales[i].get(), {rows, width, width, width, b->layout},
                     st);
  };
  c.launch = run;
  c.count_wrong = [=](cudaStream_t st) { return count_twins_differing(*b, run, st); };
  return c;
}

// A two-input op's cut then quantize_act_fp8, against its fp8 form (situ_fp8, mul_sigmoid_fp8).
using BinaryFp8Op = void (*)(const bf16*, const bf16*, bf16*, __nv_fp8_e4m3*, float*, Fp8ScaleLayout, int64_t,
                             int64_t, cudaStream_t);
Case quant_binary_case(const std::string& op, BinaryOp bf16_op, BinaryFp8Op fp8_op, double flops_per_element,
                       int64_t rows, int64_t width, cudaStream_t s) {
  Case c;
  c.family = "quant";
  c.tag = "quant." + op + ".w" + std::to_string(width);
  c.shape = fmt::format("{}x{}", rows, width);
  c.cost = cost::elementwise(rows * width, 2, flops_per_element);
  const Cost q = cost::quant_act(rows, width);
  c.cost.bytes += q.bytes;
  c.cut_cost = cost::elementwise_fp8(rows, width, flops_per_element);
  c.slots = rotation_slots(c.cost.bytes);
  const int64_t n = rows * width;
  struct Buffers : Fp8Twins {
    using Fp8Twins::Fp8Twins;
    std::vector<DeviceBuffer<bf16>> a, b;
    DeviceBuffer<bf16> act;
  };
  auto b = std::make_shared<Buffers>(rows, width);
  b->a = random_slots<bf16>(c.slots, n, 71, 6.0f, s);
  b->b = random_slots<bf16>(c.slots, n, 72, 6.0f, s);
  b->act = DeviceBuffer<bf16>(size_t(n));
  auto run = [=](Variant v, int slot, cudaStream_t st) {
    const size_t i = size_t(v);
    if (v == Variant::cut) {
      fp8_op(b->a[slot].get(), b->b[slot].get(), nullptr, b->codes[i].get(), b->scales[i].get(), b->layout, rows,
             width, st);
      return;
    }
    bf16_op(Variant::cut, b->a[slot].get(), b->b[slot].get(), b->act.get(), n, st);
    quantize_act_fp8(b->act.get(), b->codes[i].get(), b->scales[i].get(), {rows, width, width, width, b->layout},
                     st);
  };
  c.launch = run;
  c.count_wrong = [=](cudaStream_t st) { return count_twins_differing(*b, run, st); };
  return c;
}

// o_norm_gate's cut then quantize_act_fp8, against o_norm_gate_fp8 (a (row, head) one group).
Case quant_o_norm_gate_case(int64_t rows, int heads, cudaStream_t s) {
  Case c;
  c.family = "quant";
  c.tag = "quant.o_norm_gate.h" + std::to_string(heads);
  const int64_t width = int64_t(heads) * 128, n = rows * width;
  c.shape = fmt::format("{}x{}x128", rows, heads);
  c.cost = cost::o_norm_gate(rows * heads, 128);
  c.cost.bytes += cost::quant_act(rows, width).bytes;
  c.cut_cost = cost::o_norm_gate_fp8(rows * heads, 128);
  c.slots = rotation_slots(c.cost.bytes);
  struct Buffers : Fp8Twins {
    using Fp8Twins::Fp8Twins;
    std::vector<DeviceBuffer<bf16>> x, g;
    DeviceBuffer<float> gamma;
    DeviceBuffer<bf16> act;
  };
  auto b = std::make_shared<Buffers>(rows, width);
  b->x = random_slots<bf16>(c.slots, n, 81, 3.0f, s);
  b->g = random_slots<bf16>(c.slots, n, 82, 6.0f, s);
  b->gamma = DeviceBuffer<float>(128);
  fill_uniform_f32(b->gamma.get(), 128, 83, 1.5f, s);
  b->act = DeviceBuffer<bf16>(size_t(n));
  const float eps = 1e-5f;
  auto run = [=](Variant v, int slot, cudaStream_t st) {
    const size_t i = size_t(v);
    if (v == Variant::cut) {
      o_norm_gate_fp8(b->x[slot].get(), b->g[slot].get(), b->gamma.get(), nullptr, b->codes[i].get(),
                      b->scales[i].get(), b->layout, rows, heads, eps, st);
      return;
    }
    o_norm_gate(Variant::cut, b->x[slot].get(), b->g[slot].get(), b->gamma.get(), b->act.get(), rows * heads, eps, st);
    quantize_act_fp8(b->act.get(), b->codes[i].get(), b->scales[i].get(), {rows, width, width, width, b->layout},
                     st);
  };
  c.launch = run;
  c.count_wrong = [=](cudaStream_t st) { return count_twins_differing(*b, run, st); };
  return c;
}

using Builders = std::vector<std::function<Case(cudaStream_t)>>;

// Each family's cases, keyed by the cut table's bench_family.
const std::map<std::string, std::function<void(Builders&, int64_t)>>& family_cases() {
  static const std::map<std::string, std::function<void(Builders&, int64_t)>> cases = {
      {"land",
       [](Builders& b, int64_t r) {
         b.push_back([r](cudaStream_t s) { return land_case(r, 12288, 0, 12288, s); });
         b.push_back([r](cudaStream_t s) { return land_case(r, 18432, 0, 18432, s); });
         b.push_back([r](cudaStream_t s) { return land_case(r, 67584, 33792, 33792, s); });
       }},
      {"conv", [](Builders& b, int64_t r) { b.push_back([r](cudaStream_t s) { return conv_case(r, 12288, s); }); }},
      {"lse_merge", [](Builders& b, int64_t r) { b.push_back([r](cudaStream_t s) { return merge_case(r, 96, s); }); }},
      {"elementwise",
       [](Builders& b, int64_t r) {
         for (int64_t width : {int64_t(7168), int64_t(12288)}) {
           b.push_back([r, width](cudaStream_t s) { return binary_case("add2", add2, 1, r, width, s); });
           b.push_back([r, width](cudaStream_t s) { return binary_case("mul_sigmoid", mul_sigmoid, 6, r, width, s); });
           b.push_back([r, width](cudaStream_t s) { return binary_case("situ", situ, 12, r, width, s); });
         }
         b.push_back([r](cudaStream_t s) { return o_norm_gate_case(r, 96, s); });
       }},
      {"attnres",
       [](Builders& b, int64_t r) {
         for (int nb = 1; nb <= kAttnResMaxBlocks; ++nb)
           b.push_back([r, nb](cudaStream_t s) { return attnres_case(r, 7168, nb, s); });
       }},
      {"quant",
       [](Builders& b, int64_t r) {
         b.push_back([r](cudaStream_t s) { return quant_rmsnorm_case(r, 7168, s); });
         b.push_back([r](cudaStream_t s) { return quant_binary_case("situ", situ, situ_fp8, 12, r, 6144, s); });
         b.push_back([r](cudaStream_t s) {
           return quant_binary_case("mul_sigmoid", mul_sigmoid, mul_sigmoid_fp8, 6, r, 12288, s);
         });
         b.push_back([r](cudaStream_t s) { return quant_o_norm_gate_case(r, 96, s); });
       }},
  };
  return cases;
}

// The cases in run order; each is built just before it runs so only one
// case's buffers are alive at a time.
Builders case_builders(const KernelsBenchOptions& o) {
  Builders b;
  for (const std::string& family : kernels_bench_families())
    if (o.families.empty() || std::find(o.families.begin(), o.families.end(), family) != o.families.end())
      family_cases().at(family)(b, o.rows);
  return b;
}

BenchRow make_row(const Case& c, Variant v, const Timing& t, double copy_tbps, double baseline_us) {
  BenchRow row;
  row.family = c.family;
  row.kernel = c.tag;
  row.variant = variant_name(v);
  row.shape = c.shape;
  row.median_us = t.median_us;
  row.min_us = t.min_us;
  row.max_us = t.max_us;
  row.reps = t.reps;
  const Cost& cost = v == Variant::cut && c.cut_cost.bytes > 0 ? c.cut_cost : c.cost;
  row.bytes = cost.bytes;
  row.flops = cost.flops;
  row.tbps = cost.bytes / (t.median_us * 1e6);
  row.tflops = cost.flops / (t.median_us * 1e6);
  row.fraction = row.tbps / copy_tbps;
  row.speedup = baseline_us / t.median_us;
  return row;
}

}  // namespace

std::vector<std::string> kernels_bench_families() {
  std::vector<std::string> families;
  for (const CutInfo& info : cut_table())
    if (*info.bench_family && family_cases().count(info.bench_family)) families.push_back(info.bench_family);
  return families;
}

int run_kernels_bench(const KernelsBenchOptions& o, RunResult& result) {
  cudaStream_t stream;
  PB_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const double copy_tbps = measure_copy_tbps(stream);
  result.numbers["copy_tbps"] = copy_tbps;
  result.text["ceiling"] = "device-to-device cudaMemcpyAsync of 2 GiB, read + write, median of 20";
  std::printf("copy ceiling: %.3f TB/s (2 GiB device-to-device, read + write)\n", copy_tbps);
  std::printf("%-13s %-18s %-22s %-8s %10s %8s %7s %8s %7s\n", "family", "case", "shape", "variant", "median_us",
              "TB/s", "frac", "speedup", "wrong");
  int failed_cases = 0;
  for (const auto& build : case_builders(o)) {
    Case c = build(stream);
    PB_CUDA(cudaStreamSynchronize(stream));
    double baseline_us = 0;
    std::vector<BenchRow> rows;
    for (Variant v : {Variant::baseline, Variant::cut}) {
      Timing t = time_launches([&](int slot, cudaStream_t st) { c.launch(v, slot, st); }, c.slots, o.warmup,
                               o.reps, stream);
      if (v == Variant::baseline) baseline_us = t.median_us;
      rows.push_back(make_row(c, v, t, copy_tbps, baseline_us));
    }
    const int64_t wrong = c.count_wrong(stream);
    failed_cases += wrong != 0;
    for (auto& row : rows) {
      row.wrong = wrong;  // the cut's promise: bit for bit its baseline
      std::printf("%-13s %-18s %-22s %-8s %10.1f %8.3f %7.3f %8.2f %7lld\n", row.family.c_str(), row.kernel.c_str(),
                  row.shape.c_str(), row.variant.c_str(), row.median_us, row.tbps, row.fraction, row.speedup,
                  (long long)wrong);
      result.bench.push_back(row);
    }
    std::fflush(stdout);
  }
  print_attnres_superstep(o.rows, result);
  PB_CUDA(cudaStreamDestroy(stream));
  return failed_cases;
}

}  // namespace pb
