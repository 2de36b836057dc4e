// The NCCL communicator of the gang, bootstrapped from MPI: rank 0 draws the
// unique id, MPI broadcasts it, every rank joins. Only built when the fabric
// needs NCCL (cross-node ranks, or `fabric: nccl`). Each rank must have set
// its CUDA device first; NCCL needs one GPU per rank.
#pragma once

#include <nccl.h>

#include "gang.h"

namespace pb {

class NcclComm {
 public:
  explicit NcclComm(const Gang& gang);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  ncclComm_t get() const { return comm_; }

 private:
  ncclComm_t comm_ = nullptr;
};

}  // namespace pb
