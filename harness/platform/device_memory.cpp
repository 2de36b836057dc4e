#include "device_memory.h"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>

#include "check.h"
#include "fd_share.h"
#include "gang.h"

namespace pb {

namespace {

int64_t aligned(int64_t bytes) {
  const int64_t a = MemoryNeeds::kBufferAlign;
  return (bytes + a - 1) / a * a;
}

int lane_of(Home h) { return int(h) - int(Home::trunk); }

MPI_Comm as_comm(void* c) { return *static_cast<MPI_Comm*>(c); }

// Each socket step of sharing a region (shared_region.h) fails past this.
constexpr double kShareTimeoutS = 60;

}  // namespace

const char* home_name(Home h) {
  switch (h) {
    case Home::weights: return "weights";
    case Home::rank: return "rank";
    case Home::trunk: return "trunk";
    case Home::mixer: return "mixer";
    case Home::ffn: return "ffn";
  }
  return "?";
}

std::string buffer_label(const std::string& block, const std::string& name, Home home) {
  if (home == Home::weights) return name + " (weights)";
  return block + "." + name;
}

std::string format_gb(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GB", bytes / 1e9);
  return buf;
}

GpuBudget gpu_budget(const std::vector<MemoryNeeds>& ranks_on_gpu, const Placement& p) {
  GpuBudget b;
  std::array<int64_t, kLanes> lanes{};
  for (const MemoryNeeds& n : ranks_on_gpu) {
    b.ranks += n.rank;
    if (p.shares_weights()) b.weights = std::max(b.weights, n.weights);
    else b.weights += n.weights;
    if (p.shares_arena())
      for (int i = 0; i < kLanes; ++i) lanes[i] = std::max(lanes[i], n.lanes[i]);
    else b.arena += n.turn_local;
  }
  if (p.shares_arena()) b.arena = lanes[0] + lanes[1] + lanes[2];
  return b;
}

DeviceMemory DeviceMemory::counting(const Placement& p) {
  DeviceMemory m(Mode::counting);
  m.placement_ = p;
  return m;
}

DeviceMemory DeviceMemory::owning() {
  DeviceMemory m(Mode::owning);
  m.fills_weights_ = true;
  return m;
}

DeviceMemory& DeviceMemory::standalone() {
  static DeviceMemory m = owning();
  return m;
}

void DeviceMemory::note(const std::string& name, int64_t bytes) {
  PB_CHECK(bytes >= 0, "DeviceMemory: negative size for " + block_ + "." + name);
  needs_.buffers.push_back({block_, name, bytes, Home::rank});
  needs_.rank += aligned(bytes);
}

void* DeviceMemory::place(const std::string& name, int64_t bytes, Home home) {
  PB_CHECK(bytes >= 0, "DeviceMemory: negative size for " + block_ + "." + name);
  needs_.buffers.push_back({block_, name, bytes, home});
  const int64_t size = aligned(bytes);
  if (home == Home::rank) {
    needs_.rank += size;
    return nullptr;
  }
  if (home == Home::weights) {
    const int64_t offset = needs_.weights;
    needs_.weights += size;
    if (mode_ != Mode::placed || !weights_) return nullptr;
    PB_CHECK(offset + size <= weights_bytes_, "DeviceMemory: the weights of " + block_ + "." + name +
                                                  " overrun the GPU's shared weight set (the ranks of one GPU "
                                                  "must take the same weights in the same order)");
    return weights_ + offset;
  }
  needs_.turn_local += size;
  const int lane = lane_of(home);
  int64_t& cursor = lane_cursor_[{block_, lane}];
  const int64_t offset = cursor;
  cursor += size;
  needs_.lanes[lane] = std::max(needs_.lanes[lane], cursor);
  if (mode_ != Mode::placed || !arena_) return nullptr;
  PB_CHECK(cursor <= lane_cap_[lane], "DeviceMemory: " + block_ + "." + name + " overruns the " + home_name(home) +
                                          " lane of the shared arena (" + std::to_string(lane_cap_[lane]) +
                                          " bytes)");
  return arena_ + lane_base_[lane] + offset;
}

void DeviceMemory::poison_arena(cudaStream_t stream) const {
  if (arena_) PB_CUDA(cudaMemsetAsync(arena_, 0xff, size_t(arena_bytes_), stream));
}

// ---- GangMemory ----

namespace {

// Sums (or maxes) of every rank's needs over `comm`.
MemoryNeeds reduce_needs(const MemoryNeeds& mine, MPI_Comm comm, const Placement& p, GpuBudget& budget) {
  const int64_t sendbuf[6] = {mine.weights, mine.lanes[0], mine.lanes[1], mine.lanes[2], mine.rank, mine.turn_local};
  int64_t maxes[6], sums[6];
  mpi_ok(MPI_Allreduce(sendbuf, maxes, 6, MPI_INT64_T, MPI_MAX, comm), "MPI_Allreduce(memory needs, max)");
  mpi_ok(MPI_Allreduce(sendbuf, sums, 6, MPI_INT64_T, MPI_SUM, comm), "MPI_Allreduce(memory needs, sum)");
  MemoryNeeds shared;
  shared.weights = maxes[0];
  for (int i = 0; i < kLanes; ++i) shared.lanes[i] = maxes[1 + i];
  budget.ranks = sums[4];
  budget.weights = p.shares_weights() ? maxes[0] : sums[0];
  budget.arena = p.shares_arena() ? shared.arena() : sums[5];
  return shared;
}

// "moe.expert_gate_up (weights), 275.0 GB"
std::string largest_buffer(const MemoryNeeds& needs) {
  const BufferNeed* largest = nullptr;
  for (const BufferNeed& b : needs.buffers)
    if (!largest || b.bytes > largest->bytes) largest = &b;
  if (!largest) return "none";
  return buffer_label(largest->block, largest->name, largest->home) + ", " + format_gb(double(largest->bytes));
}

}  // namespace

GangMemory::GangMemory(const Gang& gang, int device, bool serialized, ShareMode share,
                       const std::function<MemoryNeeds(const Placement&)>& needs_for)
    : gang_(gang), share_(share) {
  // This GPU's ranks: the node's ranks with the same device.
  MPI_Comm node, gpu;
  mpi_ok(MPI_Comm_split_type(gang.comm(), MPI_COMM_TYPE_SHARED, gang.rank(), MPI_INFO_NULL, &node),
         "MPI_Comm_split_type");
  mpi_ok(MPI_Comm_split(node, device, gang.rank(), &gpu), "MPI_Comm_split(GPU)");
  MPI_Comm_free(&node);
  gpu_comm_ = new MPI_Comm(gpu);
  MPI_Comm_rank(gpu, &gpu_rank_);
  MPI_Comm_size(gpu, &gpu_size_);
  placement_.ranks_per_gpu = gpu_size_;
  placement_.serialized = serialized;
  const MemoryNeeds mine = needs_for(placement_);
  const MemoryNeeds shared = reduce_needs(mine, gpu, placement_, budget_);

  // Refuse before allocating: every rank of the GPU decides on the first one's reading.
  size_t free_b = 0, total_b = 0;
  PB_CUDA(cudaMemGetInfo(&free_b, &total_b));
  int64_t free_bytes = int64_t(free_b);
  mpi_ok(MPI_Bcast(&free_bytes, 1, MPI_INT64_T, 0, gpu), "MPI_Bcast(free memory)");
  if (budget_.total() > free_bytes)
    throw_error(__FILE__, __LINE__,
                std::string(kDoesNotFitMessage) + " " + std::to_string(device) + " of " + gang.host() + ": " +
                    std::to_string(gpu_size_) + " rank(s) need " + format_gb(double(budget_.total())) +
                    " (weights " + format_gb(double(budget_.weights)) + ", turn-local arena " +
                    format_gb(double(budget_.arena)) + ", rank buffers " + format_gb(double(budget_.ranks)) +
                    ") and " + format_gb(double(free_bytes)) + " are free of " + format_gb(double(total_b)) +
                    "; this rank's largest buffer: " + largest_buffer(mine) +
                    " (`prefill-bench plan` prints the budget)");

  memory_.fills_weights_ = true;
  if (placement_.shares_weights()) {
    memory_.mode_ = DeviceMemory::Mode::placed;
    weights_ = SharedRegion::share(share_, shared.weights, gpu, device, "the weights", kShareTimeoutS);
    memory_.weights_ = weights_.base();
    memory_.weights_bytes_ = shared.weights;
    memory_.fills_weights_ = gpu_rank_ == 0;
  }
  if (placement_.shares_arena()) {
    memory_.mode_ = DeviceMemory::Mode::placed;
    arena_ = SharedRegion::share(share_, shared.arena(), gpu, device, "the turn-local arena", kShareTimeoutS);
    memory_.arena_ = arena_.base();
    memory_.arena_bytes_ = shared.arena();
    int64_t base = 0;
    for (int i = 0; i < kLanes; ++i) {
      memory_.lane_base_[i] = base;
      memory_.lane_cap_[i] = shared.lanes[i];
      base += shared.lanes[i];
    }
  }
  memory_.placement_ = placement_;
}

void GangMemory::after_weights_filled(cudaStream_t stream) {
  PB_CUDA(cudaStreamSynchronize(stream));
  PB_CUDA(cudaDeviceSynchronize());
  mpi_ok(MPI_Barrier(as_comm(gpu_comm_)), "MPI_Barrier(weights filled)");
}

GangMemory::~GangMemory() {
  // Every rank has unmapped (its blocks are gone) before the first releases
  // (legacy IPC needs the order; under vmm each process's reference counts).
  if (gpu_rank_ != 0) {
    weights_.release();
    arena_.release();
  }
  // Unwinding from an error: no collective (the others may never come; the
  // driver aborts the gang), the process's memory goes with it.
  if (std::uncaught_exceptions() > 0) {
    weights_.abandon();
    arena_.abandon();
    return;
  }
  if (gpu_comm_) {
    MPI_Barrier(as_comm(gpu_comm_));
    weights_.release();
    arena_.release();
    MPI_Comm c = as_comm(gpu_comm_);
    MPI_Comm_free(&c);
    delete static_cast<MPI_Comm*>(gpu_comm_);
  }
}

std::string GangMemory::describe() const {
  return std::to_string(gpu_size_) + " rank(s) on this GPU" + (placement_.serialized ? ", serialized" : "") +
         ": weights " + format_gb(double(budget_.weights)) + (placement_.shares_weights() ? " (shared)" : "") +
         ", turn-local arena " + format_gb(double(budget_.arena)) + (placement_.shares_arena() ? " (shared)" : "") +
         ", rank buffers " + format_gb(double(budget_.ranks)) + " = " + format_gb(double(budget_.total())) +
         (placement_.shares_weights() ? std::string("; shared over ") + share_mode_name(share_) : "") +
         (share_granularity() ? " at " + std::to_string(share_granularity() >> 20) + " MiB granularity" : "");
}

int64_t GangMemory::share_granularity() const {
  return weights_.granularity() ? weights_.granularity() : arena_.granularity();
}

}  // namespace pb
