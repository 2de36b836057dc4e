// Where every device buffer of the superstep lives (docs/design.md §8), and
// what a rank needs, counted without a device for `plan`.
//
// Homes:
//   weights  the model's read-only weights. When several ranks share a GPU,
//            once per GPU: the GPU's first rank allocates and fills them, the
//            others map them (shared_region.h; same seed, same bits).
//   rank     this rank's own: what survives between its turns (the residual
//            stream, the AttnRes snapshots, the fabric slab, KDA carries and
//            prepared chunks, the MLA gate and accumulators).
//   trunk, mixer, ffn
//            turn-local: written and read within one turn (turns.h). Under
//            serialize_ranks with several ranks on a GPU they live in one
//            arena per GPU that every rank's turns reuse. The arena has one
//            lane per home; blocks that never run in one turn share a lane
//            (MLA and KDA the mixer lane, MoE and the dense FFN the ffn lane),
//            each from the lane's start, so a lane is as large as its
//            largest block.
// Which home a buffer takes is the block's `take` function's contract; the
// poisoned-arena check (`verify`, scenario key debug.poison_arena) proves it.
//
// Modes:
//   counting  take() hands out null views with their sizes: nothing touches a
//             device (plan's memory budget, and the sizing pass of a run);
//   owning    every take() is its own allocation, owned by the buffer (one
//             rank per GPU, tests, benchmarks);
//   placed    weights and lanes are views into regions the GPU's ranks share
//             (GangMemory), rank buffers are owned.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "device_buffer.h"
#include "shared_region.h"

namespace pb {

// How a gang's refusal before allocating begins ("the scenario does not fit
// on GPU <n> of <host>: ..."); `sweep` plans a point whose run says it.
constexpr const char* kDoesNotFitMessage = "the scenario does not fit on GPU";


class Gang;

enum class Home { weights, rank, trunk, mixer, ffn };
constexpr int kLanes = 3;  // trunk, mixer, ffn
const char* home_name(Home h);

struct BufferNeed {
  std::string block, name;
  int64_t bytes = 0;
  Home home = Home::rank;
};
// A buffer's name in messages: "<block>.<name>"; a weight by its own name,
// which says its block, and its home ("moe.router (weights)"), since weights
// are taken wherever their block's weight set is built.
std::string buffer_label(const std::string& block, const std::string& name, Home home);

// What one rank asks for. Lane sizes are the largest block in each lane (the
// shared arena); `turn_local` is every lane buffer apart (what owning
// allocations take). Every buffer starts on a kBufferAlign boundary.
struct MemoryNeeds {
  static constexpr int64_t kBufferAlign = 256;
  std::vector<BufferNeed> buffers;   // in take order
  int64_t weights = 0;
  int64_t rank = 0;
  std::array<int64_t, kLanes> lanes{};
  int64_t turn_local = 0;
  int64_t arena() const { return lanes[0] + lanes[1] + lanes[2]; }
  int64_t total() const { return weights + rank + turn_local; }  // one rank alone, owning
};

// How the ranks of a gang sit on GPUs.
struct Placement {
  int ranks_per_gpu = 1;
  bool serialized = false;  // serialize_ranks: one rank computes at a time
  bool shares_weights() const { return ranks_per_gpu > 1; }
  bool shares_arena() const { return ranks_per_gpu > 1 && serialized; }
};

// Device memory of one GPU for `ranks` of a scenario under a placement:
// weights and arena once when shared, the rank homes summed.
struct GpuBudget {
  int64_t weights = 0, arena = 0, ranks = 0;
  int64_t total() const { return weights + arena + ranks; }
};
GpuBudget gpu_budget(const std::vector<MemoryNeeds>& ranks_on_gpu, const Placement& p);

class DeviceMemory {
 public:
  enum class Mode { counting, owning, placed };
  static DeviceMemory counting(const Placement& p = {});
  static DeviceMemory owning();
  // A process-wide owning instance, for blocks built standalone (tests, benchmarks).
  static DeviceMemory& standalone();


  Mode mode() const { return mode_; }
  bool counting_only() const { return mode_ == Mode::counting; }
  const Placement& placement() const { return placement_; }
  // Whether this rank writes the weights it takes (false for a rank that maps
  // another rank's, and when counting).
  bool fills_weights() const { return fills_weights_; }

  // Buffers taken after this belong to `block` (its lane space starts at 0).
  void begin_block(const std::string& block) { block_ = block; }
  // `count` elements under `name`: a null view when counting, a view into a
  // shared region when placed there, else an owned allocation (one that does
  // not fit is an error naming the buffer (buffer_label), the bytes asked and free).
  template <class T>
  DeviceBuffer<T> take(const std::string& name, int64_t count, Home home) {
    void* shared = place(name, count * int64_t(sizeof(T)), home);
    if (mode_ == Mode::counting || shared) return DeviceBuffer<T>::view(static_cast<T*>(shared), size_t(count));
    return DeviceBuffer<T>(size_t(count), buffer_label(block_, name, home));
  }
  // Memory a part allocates itself (e.g. the KDA workspace, the fabric slab), counted as a rank buffer.
  void note(const std::string& name, int64_t bytes);
  const MemoryNeeds& needs() const { return needs_; }

  // The turn-local arena shared by this GPU's ranks (null unless placed with a
  // shared arena), and its bytes: the poisoned-arena check fills it with 0xff.
  void* arena() const { return arena_; }
  int64_t arena_bytes() const { return arena_bytes_; }
  void poison_arena(cudaStream_t stream) const;

 private:
  friend class GangMemory;
  explicit DeviceMemory(Mode m) : mode_(m) {}
  // Records the need; returns the buffer's place in a shared region, or null.
  void* place(const std::string& name, int64_t bytes, Home home);

  Mode mode_ = Mode::counting;
  Placement placement_;
  bool fills_weights_ = false;
  std::string block_ = "?";
  MemoryNeeds needs_;
  std::map<std::pair<std::string, int>, int64_t> lane_cursor_;  // (block, lane) -> bytes taken
  // placed: the shared regions' bases and capacities
  char* weights_ = nullptr;
  char* arena_ = nullptr;
  int64_t weights_bytes_ = 0, arena_bytes_ = 0;
  std::array<int64_t, kLanes> lane_base_{}, lane_cap_{};
  int64_t weights_used_ = 0;
};

// The shared regions of one GPU's ranks and the rank's DeviceMemory over them.
// Collective over the gang. Every rank passes its counted needs; the ranks of
// one GPU (local rank mod visible devices) agree on the weights and the lanes
// (the largest of each), check before allocating that the GPU can hold
// weights + arena + their rank buffers (else every rank fails with the
// numbers), then the GPU's first rank allocates the regions and the others
// map them, the way `share` says (shared_region.h). The first rank fills the
// weights; a barrier over the GPU's ranks (after_weights_filled) orders the
// fill before any use.
class GangMemory {
 public:
  // needs_for: what this rank takes under the placement the GPU's ranks form.
  GangMemory(const Gang& gang, int device, bool serialized, ShareMode share,
             const std::function<MemoryNeeds(const Placement&)>& needs_for);
  ~GangMemory();
  GangMemory(const GangMemory&) = delete;
  GangMemory& operator=(const GangMemory&) = delete;

  DeviceMemory& memory() { return memory_; }
  const DeviceMemory& memory() const { return memory_; }
  const Placement& placement() const { return placement_; }
  const GpuBudget& budget() const { return budget_; }
  ShareMode share_mode() const { return share_; }
  // The shared regions' mapping granularity (vmm), 0 when none is mapped by vmm.
  int64_t share_granularity() const;
  // Call after the blocks are built: the first rank's weights are written.
  void after_weights_filled(cudaStream_t stream);
  // One line for the run's output: weights, arena, rank buffers, per GPU.
  std::string describe() const;

 private:
  const Gang& gang_;
  ShareMode share_;
  Placement placement_;
  GpuBudget budget_;
  int gpu_rank_ = 0, gpu_size_ = 1;
  void* gpu_comm_ = nullptr;  // MPI_Comm of this GPU's ranks (MPI kept out of the header)
  SharedRegion weights_, arena_;
  DeviceMemory memory_{DeviceMemory::Mode::owning};
};

// "12.3 GB"
std::string format_gb(double bytes);

}  // namespace pb
