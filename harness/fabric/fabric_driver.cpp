#include "fabric_driver.h"

#include <cuda.h>  // driver types and enums only

#include <string>

#include "check.h"
#include "launch.h"

namespace pb {

namespace {

using StreamValue64Fn = CUresult(CUDAAPI*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
using DeviceAttributeFn = CUresult(CUDAAPI*)(int*, CUdevice_attribute, CUdevice);

void cu_check(CUresult rc, const char* what) {
  PB_CHECK(rc == CUDA_SUCCESS, std::string(what) + " failed: CUresult " + std::to_string(int(rc)));
}

struct StreamMemOps {
  StreamValue64Fn write64 = nullptr;
  StreamValue64Fn wait64 = nullptr;
};

// Looked up once per process.
const StreamMemOps& stream_mem_ops() {
  static const StreamMemOps ops = [] {
    StreamMemOps o;
    o.write64 = reinterpret_cast<StreamValue64Fn>(driver_entry_point("cuStreamWriteValue64", "the fabric"));
    o.wait64 = reinterpret_cast<StreamValue64Fn>(driver_entry_point("cuStreamWaitValue64", "the fabric"));
    return o;
  }();
  return ops;
}

}  // namespace

void require_stream_mem_ops(int device) {
  auto get_attribute = reinterpret_cast<DeviceAttributeFn>(driver_entry_point("cuDeviceGetAttribute", "the fabric"));
  int can64 = 0;
  cu_check(get_attribute(&can64, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, CUdevice(device)),
           "cuDeviceGetAttribute(CAN_USE_64_BIT_STREAM_MEM_OPS)");
  PB_CHECK(can64 == 1, "device " + std::to_string(device) +
                           " does not support 64-bit stream memory operations (cuStreamWaitValue64): the "
                           "fabric's doorbells need them (driver / platform without stream mem ops)");
  stream_mem_ops();
}

void stream_write_u64(cudaStream_t stream, void* addr, uint64_t value) {
  cu_check(stream_mem_ops().write64(CUstream(stream), CUdeviceptr(addr), value, CU_STREAM_WRITE_VALUE_DEFAULT),
           "cuStreamWriteValue64");
}

void stream_wait_u64_geq(cudaStream_t stream, const void* addr, uint64_t value) {
  cu_check(stream_mem_ops().wait64(CUstream(stream), CUdeviceptr(addr), value, CU_STREAM_WAIT_VALUE_GEQ),
           "cuStreamWaitValue64");
}

}  // namespace pb
