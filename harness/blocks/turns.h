// How the ranks of a gang run one phase of a superstep (scenario key
// serialize_ranks). Concurrent: every rank runs the phase at once. Serialized:
// rank by rank, the others waiting at a barrier, each turn drained (fabric
// waits) and synchronized before the next, so each rank's kernels run alone on
// a shared GPU. Phases must only wait on work of earlier turns (lower ranks,
// or earlier phases): blocks split their work that way (mla_block.h, kda_block.h).
#pragma once

#include <cuda_runtime_api.h>

#include <functional>

#include "gang.h"

namespace pb {

class IpcFabric;

using Turn = std::function<void(const std::function<void()>& phase)>;

// The Turn keeps references to gang and fab: they must outlive it.
Turn make_turn(const Gang& gang, bool serial, IpcFabric* fab, cudaStream_t stream);

}  // namespace pb
