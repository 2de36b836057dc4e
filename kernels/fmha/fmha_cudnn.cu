// cuDNN FMHA engine: cuDNN 9's fused SDPA forward through the cuDNN frontend
// graph API (header-only, from PyPI: docs/design.md §7). CMake compiles this file
// only when it finds cuDNN 9 and the frontend headers, and then defines
// PB_HAVE_CUDNN for pb_kernels; fmha.cu holds the stubs otherwise.
//
// The contract is fmha.h's (docs/design.md §4 "FMHA contract"), mapped onto cuDNN's
// [B, H, S, D] tensors with B = 1 and our strides (in elements):
//   q   [tq, H, d_qk] bf16  -> Q     dims {1, H, tq, d_qk}  strides {-, q_head_stride, q_token_stride, 1}
//   k   [tk, H, d_qk] bf16  -> K     dims {1, H, tk, d_qk}  strides {-, k_head_stride, k_token_stride, 1}
//   v   [tk, H, d_v]  bf16  -> V     dims {1, H, tk, d_v}   strides {-, v_head_stride, v_token_stride, 1}
//   o   [tq, H, d_v]  bf16  -> O     dims {1, H, tq, d_v}   strides {tq*H*d_v, d_v, H*d_v, 1}
//   lse [H, tq]       f32   -> Stats dims {1, H, tq, 1}     strides {H*tq, tq, 1, 1}
// cuDNN's Stats are max + log(sum exp(s - max)) over s = scale * q.k after the
// mask, natural log (frontend 1.32: the softmax node's LOG + ADD max, and
// stats_use_log2 left false), i.e. exactly our lse: written in place, no conversion.
//
// Mask: causal is bottom-right aligned (query i sees keys j <= i + tk - tq):
// DiagonalAlignment_t::BOTTOM_RIGHT with diagonal band right bound 0. cuDNN
// refuses a bottom-right mask with tq > tk; then the first tq - tk queries see
// no key and are written here (o = 0, lse = -inf), and cuDNN runs on the last
// tk queries (Q and O pointers offset, strides unchanged) with its Stats in a
// packed [H, tk] scratch that one cudaMemcpy2DAsync puts into lse[:, tq-tk:]
// (an offset lse pointer is only 4-byte aligned, and cuDNN before 9.12 writes
// Stats packed whatever the strides). tk = 0 writes every row as empty.
//
// Plans: built on first use of a key (sizes, scale bits, all strides, pointer
// alignment class, device) into a process-wide cache; one cudnnHandle per
// device, its stream set on every call; each plan's workspace is cudaMalloc'ed
// once and freed at exit. Calls are serialized on the host by one mutex. Two
// streams running the same plan at the same time would share its workspace:
// run one shape on one stream at a time.
//
// Host code only: CMake compiles this file with the C++ compiler (LANGUAGE CXX;
// g++ parses the frontend's headers about 3x faster than nvcc), so it holds no
// kernel; the -inf fill of empty rows is fill_constant_f32 (random_fill.h).
#include "fmha.h"

#ifdef PB_HAVE_CUDNN

#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <cudnn_frontend.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "check.h"
#include "random_fill.h"

// cudnnStatus_t calls.
#define PB_CUDNN(expr)                                                            \
  do {                                                                            \
    cudnnStatus_t pb_st_ = (expr);                                                \
    if (pb_st_ != CUDNN_STATUS_SUCCESS)                                           \
      ::pb::throw_error(__FILE__, __LINE__,                                       \
                        std::string(#expr) + ": " + cudnnGetErrorString(pb_st_)); \
  } while (0)

// cudnn_frontend::error_t calls; `what` names the shape being planned or run.
#define PB_CUDNN_FE(expr, what)                                                     \
  do {                                                                              \
    ::cudnn_frontend::error_t pb_fe_ = (expr);                                      \
    if (!pb_fe_.is_good())                                                          \
      ::pb::throw_error(__FILE__, __LINE__,                                         \
                        std::string(#expr) + " (cuDNN frontend error " +            \
                            std::to_string(static_cast<int>(pb_fe_.get_code())) +   \
                            ": " + pb_fe_.get_message() + ") for " + (what));       \
  } while (0)

namespace pb {

namespace {

namespace fe = cudnn_frontend;
using bf16 = __nv_bfloat16;

// Tensor uids of the graph: the variant pack binds pointers to these.
constexpr int64_t kUidQ = 1, kUidK = 2, kUidV = 3, kUidO = 4, kUidStats = 5;

// Largest power of two <= 16 dividing the address: the alignment the plan
// promises cuDNN (CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT), so it is part of the key.
int64_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int64_t align = 16;
  while (align > 1 && a % static_cast<uintptr_t>(align) != 0) align /= 2;
  return align;
}

// What cuDNN sees of one call (after the tq > tk causal slice).
struct Geometry {
  int device;
  int64_t tq;       // queries cuDNN computes
  int64_t tq_full;  // all queries (o's token extent, lse's row length)
  bool stats_scratch;  // Stats go to the plan's packed [H, tq] scratch, not lse
  int64_t tk;
  int64_t heads, d_qk, d_v;
  bool causal;
  float scale;
  int64_t q_token, q_head, k_token, k_head, v_token, v_head;
  int64_t align_q, align_k, align_v, align_o, align_lse;

  std::vector<int64_t> key() const {
    uint32_t scale_bits;
    std::memcpy(&scale_bits, &scale, sizeof scale_bits);
    return {device, tq, tq_full, stats_scratch ? 1 : 0, tk, heads, d_qk, d_v, causal ? 1 : 0, scale_bits,
            q_token, q_head, k_token, k_head, v_token, v_head,
            align_q, align_k, align_v, align_o, align_lse};
  }

  std::string describe() const {
    return "cuDNN SDPA tq=" + std::to_string(tq) + " (of " + std::to_string(tq_full) +
           ") tk=" + std::to_string(tk) + " heads=" + std::to_string(heads) +
           " d=" + std::to_string(d_qk) + "/" + std::to_string(d_v) +
           (causal ? " causal(bottom-right)" : " dense") + " scale=" + std::to_string(scale) +
           " strides q " + std::to_string(q_token) + "/" + std::to_string(q_head) + " k " +
           std::to_string(k_token) + "/" + std::to_string(k_head) + " v " +
           std::to_string(v_token) + "/" + std::to_string(v_head) + " align q/k/v/o/lse " +
           std::to_string(align_q) + "/" + std::to_string(align_k) + "/" +
           std::to_string(align_v) + "/" + std::to_string(align_o) + "/" +
           std::to_string(align_lse) + (stats_scratch ? " (stats via scratch)" : "");
  }

  int64_t stats_row() const { return stats_scratch ? tq : tq_full; }
};

struct Plan {
  std::shared_ptr<fe::graph::Graph> graph;
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;
  float* stats = nullptr;  // [H, tq] packed, when Geometry::stats_scratch
  int64_t stats_bytes = 0;

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  // Runs at exit (the cache is a function-local static): an error here (the
  // runtime already unloading, a device reset) is ignored.
  ~Plan() {
    if (workspace) (void)cudaFree(workspace);
    if (stats) (void)cudaFree(stats);
  }
};

// The handles are left to the process exit: cudnnDestroy after the CUDA
// context is gone is not safe.
struct Engine {
  std::mutex mutex;
  std::map<int, cudnnHandle_t> handles;  // device -> handle
  std::map<std::vector<int64_t>, std::unique_ptr<Plan>> plans;
};

Engine& engine() {
  static Engine e;
  return e;
}

cudnnHandle_t handle_for(Engine& e, int device) {
  auto it = e.handles.find(device);
  if (it != e.handles.end()) return it->second;
  cudnnHandle_t h = nullptr;
  PB_CUDNN(cudnnCreate(&h));
  e.handles.emplace(device, h);
  return h;
}

// Batch stride for B = 1: cuDNN never steps it; one past the last element.
int64_t batch_stride(int64_t rows, int64_t row_stride, int64_t heads, int64_t head_stride,
                     int64_t d) {
  const int64_t a = rows * row_stride, b = heads * head_stride;
  return std::max(std::max(a, b), d);
}

// The SDPA graph of one geometry, not yet validated or built. sm_version > 0
// fixes the target architecture (host-only checks); 0 asks the current device.
std::shared_ptr<fe::graph::Graph> make_graph(const Geometry& g, int sm_version = 0) {
  auto graph = std::make_shared<fe::graph::Graph>();
  if (sm_version > 0) graph->set_sm_version(sm_version);
  graph->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);

  const int64_t H = g.heads;
  auto q = graph->tensor(fe::graph::Tensor_attributes()
                             .set_name("Q")
                             .set_uid(kUidQ)
                             .set_data_type(fe::DataType_t::BFLOAT16)
                             .set_dim({1, H, g.tq, g.d_qk})
                             .set_stride({batch_stride(g.tq, g.q_token, H, g.q_head, g.d_qk),
                                          g.q_head, g.q_token, 1})
                             .set_alignment(g.align_q));
  auto k = graph->tensor(fe::graph::Tensor_attributes()
                             .set_name("K")
                             .set_uid(kUidK)
                             .set_data_type(fe::DataType_t::BFLOAT16)
                             .set_dim({1, H, g.tk, g.d_qk})
                             .set_stride({batch_stride(g.tk, g.k_token, H, g.k_head, g.d_qk),
                                          g.k_head, g.k_token, 1})
                             .set_alignment(g.align_k));
  auto v = graph->tensor(fe::graph::Tensor_attributes()
                             .set_name("V")
                             .set_uid(kUidV)
                             .set_data_type(fe::DataType_t::BFLOAT16)
                             .set_dim({1, H, g.tk, g.d_v})
                             .set_stride({batch_stride(g.tk, g.v_token, H, g.v_head, g.d_v),
                                          g.v_head, g.v_token, 1})
                             .set_alignment(g.align_v));

  auto sdpa = fe::graph::SDPA_attributes()
                  .set_name("pb_fmha")
                  .set_generate_stats(true)
                  .set_attn_scale(g.scale);
  if (g.causal) {
    sdpa.set_diagonal_alignment(fe::DiagonalAlignment_t::BOTTOM_RIGHT)
        .set_diagonal_band_right_bound(0);
  }
  auto outputs = graph->sdpa(q, k, v, sdpa);
  auto o = outputs[0];
  auto stats = outputs[1];
  o->set_output(true)
      .set_uid(kUidO)
      .set_data_type(fe::DataType_t::BFLOAT16)
      .set_dim({1, H, g.tq, g.d_v})
      .set_stride({g.tq_full * H * g.d_v, g.d_v, H * g.d_v, 1})
      .set_alignment(g.align_o);
  stats->set_output(true)
      .set_uid(kUidStats)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim({1, H, g.tq, 1})
      .set_stride({H * g.stats_row(), g.stats_row(), 1, 1})
      .set_alignment(g.align_lse);
  return graph;
}

std::unique_ptr<Plan> build_plan(cudnnHandle_t handle, const Geometry& g) {
  const std::string what = g.describe();
  auto graph = make_graph(g);
  PB_CUDNN_FE(graph->validate(), what);
  PB_CUDNN_FE(graph->build_operation_graph(handle), what);
  PB_CUDNN_FE(graph->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), what);
  PB_CUDNN_FE(graph->check_support(), what);
  PB_CUDNN_FE(graph->build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), what);

  auto plan = std::make_unique<Plan>();
  plan->graph = std::move(graph);
  PB_CUDNN_FE(plan->graph->get_workspace_size(plan->workspace_bytes), what);
  if (plan->workspace_bytes > 0) PB_CUDA(cudaMalloc(&plan->workspace, plan->workspace_bytes));
  if (g.stats_scratch) {
    plan->stats_bytes = int64_t(sizeof(float)) * g.heads * g.tq;
    PB_CUDA(cudaMalloc(&plan->stats, size_t(plan->stats_bytes)));
  }
  return plan;
}

// Queries that see no key (causal with tq > tk, or tk = 0): o rows [0, rows)
// = +0 (bf16 0x0000), lse[h][0, rows) = -inf, both on the stream.
void write_empty_rows(bf16* o, float* lse, int64_t rows, int64_t tq, int heads, int d_v,
                      cudaStream_t stream) {
  if (rows <= 0) return;
  PB_CUDA(cudaMemsetAsync(o, 0, sizeof(bf16) * rows * heads * d_v, stream));
  fill_constant_f32(lse, tq, rows, heads, -INFINITY, stream);
}

// One cuDNN call: query rows [first, first + g.tq) of the contract's call over
// its key rows [0, g.tk).
struct Call {
  int64_t first;  // the first computed query row
  const bf16* q;  // its q row
  bf16* o;        // its o row
  float* lse;     // its lse column: [h][first + i] at lse + h * tq + i
  Geometry g;
};

// Query rows [first, first + rows) over keys [0, keys); Stats through the
// scratch when asked (rows that do not start lse's rows, or a partial row).
Call make_call(const FmhaTensors& t, const FmhaShape& s, int device, int64_t first, int64_t rows, int64_t keys,
               bool stats_scratch) {
  Call c{};
  c.first = first;
  c.q = t.q ? t.q + first * t.q_token_stride : nullptr;
  c.o = t.o + first * s.heads * static_cast<int64_t>(s.d_v);
  c.lse = t.lse + first;
  Geometry& g = c.g;
  g.device = device;
  g.tq = rows;
  g.tq_full = s.tq;
  g.stats_scratch = stats_scratch;
  g.tk = keys;
  g.heads = s.heads;
  g.d_qk = s.d_qk;
  g.d_v = s.d_v;
  g.causal = s.causal;
  g.scale = s.scale;
  g.q_token = t.q_token_stride;
  g.q_head = t.q_head_stride;
  g.k_token = t.k_token_stride;
  g.k_head = t.k_head_stride;
  g.v_token = t.v_token_stride;
  g.v_head = t.v_head_stride;
  g.align_q = alignment_of(c.q);
  g.align_k = alignment_of(t.k);
  g.align_v = alignment_of(t.v);
  g.align_o = alignment_of(c.o);
  g.align_lse = g.stats_scratch ? 16 : alignment_of(c.lse);  // the scratch is cudaMalloc'ed
  return c;
}

// The leading queries that see no key (causal with tq > tk, or tk = 0).
int64_t empty_rows(const FmhaShape& s) { return s.tk == 0 ? s.tq : (s.causal && s.tq > s.tk ? s.tq - s.tk : 0); }

// The cuDNN call of one contract call: the rows after the empty ones (none
// when every row is empty).
std::vector<Call> plan_calls(const FmhaTensors& t, const FmhaShape& s, int device) {
  const int64_t empty = empty_rows(s);
  if (empty == s.tq) return {};
  return {make_call(t, s, device, empty, s.tq - empty, s.tk, empty > 0)};
}

// Runs one cuDNN call (its plan built on first use), then its Stats into lse.
void run_call(Engine& e, const Call& c, const FmhaTensors& t, cudaStream_t stream) {
  const Geometry& g = c.g;
  cudnnHandle_t handle = handle_for(e, g.device);
  const std::vector<int64_t> key = g.key();
  auto it = e.plans.find(key);
  if (it == e.plans.end()) it = e.plans.emplace(key, build_plan(handle, g)).first;
  const Plan& plan = *it->second;

  std::unordered_map<int64_t, void*> pack = {
      {kUidQ, const_cast<bf16*>(c.q)},
      {kUidK, const_cast<bf16*>(t.k)},
      {kUidV, const_cast<bf16*>(t.v)},
      {kUidO, c.o},
      {kUidStats, g.stats_scratch ? static_cast<void*>(plan.stats) : static_cast<void*>(c.lse)},
  };
  PB_CUDNN(cudnnSetStream(handle, stream));
  PB_CUDNN_FE(plan.graph->execute(handle, pack, plan.workspace), g.describe());
  if (g.stats_scratch) {
    PB_CUDA(cudaMemcpy2DAsync(c.lse, sizeof(float) * g.tq_full, plan.stats, sizeof(float) * g.tq,
                              sizeof(float) * g.tq, g.heads, cudaMemcpyDeviceToDevice, stream));
  }
}

}  // namespace

std::string fmha_cudnn_version() {
  const size_t v = cudnnGetVersion();  // cuDNN 9: major * 10000 + minor * 100 + patch
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

FmhaPlanMemory fmha_cudnn_plan_memory() {
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  FmhaPlanMemory m;
  for (const auto& [key, plan] : e.plans) {
    ++m.plans;
    m.bytes += plan->workspace_bytes + plan->stats_bytes;
  }
  return m;
}

bool fmha_cudnn_available() {
  // Linked against libcudnn, so the library is there; the graph sub-library
  // must load and match. Neither call needs a device.
  if (cudnnGetVersion() < 90000) return false;
  return cudnnGraphVersionCheck() == CUDNN_STATUS_SUCCESS;
}

void fmha_cudnn(const FmhaTensors& t, const FmhaShape& s, cudaStream_t stream) {
  PB_CHECK(s.tq >= 0 && s.tk >= 0 && s.heads > 0,
           "fmha_cudnn: sizes tq " + std::to_string(s.tq) + ", tk " + std::to_string(s.tk) +
               ", heads " + std::to_string(s.heads));
  PB_CHECK((s.d_qk == 192 || s.d_qk == 128) && s.d_v == 128,
           "fmha_cudnn: head dims " + std::to_string(s.d_qk) + "/" + std::to_string(s.d_v) +
               " (the contract has 192/128 and 128/128)");
  PB_CHECK(std::isfinite(s.scale) && s.scale > 0.0f, "fmha_cudnn: scale must be finite and > 0");
  if (s.tq == 0) return;
  PB_CHECK(t.o && t.lse, "fmha_cudnn: null o or lse");

  int device = 0;
  PB_CUDA(cudaGetDevice(&device));
  write_empty_rows(t.o, t.lse, empty_rows(s), s.tq, s.heads, s.d_v, stream);
  const std::vector<Call> calls = plan_calls(t, s, device);
  if (calls.empty()) return;
  PB_CHECK(t.q && t.k && t.v, "fmha_cudnn: null q, k or v");
  PB_CHECK(t.q_token_stride > 0 && t.q_head_stride > 0 && t.k_token_stride > 0 &&
               t.k_head_stride > 0 && t.v_token_stride > 0 && t.v_head_stride > 0,
           "fmha_cudnn: strides must be positive");

  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  for (const Call& c : calls) run_call(e, c, t, stream);
}

}  // namespace pb

#endif  // PB_HAVE_CUDNN
