#include "nccl_comm.h"

#include <cstring>
#include <string>

#include "check.h"

namespace pb {

namespace {
void nccl_check(ncclResult_t rc, const char* what) {
  if (rc != ncclSuccess && rc != ncclInProgress)
    throw Error(std::string(what) + ": " + ncclGetErrorString(rc) + " (" + ncclGetLastError(nullptr) + ")");
}
}  // namespace

NcclComm::NcclComm(const Gang& gang) {
  ncclUniqueId id{};
  if (gang.is_root()) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  std::string bytes(reinterpret_cast<const char*>(&id), sizeof id);
  bytes = gang.broadcast(bytes);
  PB_CHECK(bytes.size() == sizeof id, "NCCL unique id of the wrong size from rank 0");
  std::memcpy(&id, bytes.data(), sizeof id);
  nccl_check(ncclCommInitRank(&comm_, gang.size(), id, gang.rank()), "ncclCommInitRank");
}

NcclComm::~NcclComm() {
  if (comm_) ncclCommDestroy(comm_);
}

}  // namespace pb
