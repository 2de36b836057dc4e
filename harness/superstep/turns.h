// How the ranks of a gang run one phase of a superstep (scenario key
// serialize_ranks). Concurrent: every rank runs the phase at once. Serialized:
// rank by rank, the others waiting at a barrier, each turn drained (fabric
// waits) and synchronized before the next, so each rank's kernels run alone on
// a shared GPU. Phases must only wait on work of earlier turns (lower ranks,
// or earlier phases): blocks split their work that way (mla_block.h, kda_block.h).
//
// settle_ms (scenario key turn_settle_ms): a serialized turn starts after the
// GPU has idled this long. A GPU at its power cap sets its SM clock from the
// last few hundred ms of work, so without a settle a turn inherits the power
// state of the turns before it (measured in docs/lane.md).
#pragma once

#include <cuda_runtime_api.h>

#include <functional>

#include "gang.h"

namespace pb {

class DeviceMemory;
class Fabric;

using Turn = std::function<void(const std::function<void()>& phase)>;

// The Turn keeps references to gang and fab: they must outlive it. A
// serialized Turn puts fab into turn taking (Fabric::take_turns) and waits for
// other ranks' turns in Fabric::barrier(), which launches the NCCL sends they ask for.
// poison (debug.poison_arena): a serialized turn ends by filling the GPU's
// shared turn-local arena with 0xff, so a buffer filed as turn-local but read
// in a later turn reads NaN (device_memory.h); it must outlive the Turn too.
Turn make_turn(const Gang& gang, bool serial, Fabric* fab, cudaStream_t stream, int settle_ms = 0,
               const DeviceMemory* poison = nullptr);

}  // namespace pb
