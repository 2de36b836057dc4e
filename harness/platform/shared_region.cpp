#include "shared_region.h"

#include <cuda.h>  // driver types and enums only: nothing here links libcuda
#include <cuda_runtime_api.h>

#include <algorithm>
#include <exception>

#include "check.h"
#include "device_buffer.h"
#include "fd_share.h"
#include "launch.h"

namespace pb {

namespace {

// The driver's virtual memory calls (CUDA 12 ABI), looked up once per process.
struct VmmCalls {
  CUresult(CUDAAPI* error_name)(CUresult, const char**);
  CUresult(CUDAAPI* device_attribute)(int*, CUdevice_attribute, CUdevice);
  CUresult(CUDAAPI* granularity)(size_t*, const CUmemAllocationProp*, CUmemAllocationGranularity_flags);
  CUresult(CUDAAPI* create)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long);
  CUresult(CUDAAPI* export_fd)(void*, CUmemGenericAllocationHandle, CUmemAllocationHandleType, unsigned long long);
  CUresult(CUDAAPI* import_fd)(CUmemGenericAllocationHandle*, void*, CUmemAllocationHandleType);
  CUresult(CUDAAPI* reserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long);
  CUresult(CUDAAPI* map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
  CUresult(CUDAAPI* set_access)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t);
  CUresult(CUDAAPI* unmap)(CUdeviceptr, size_t);
  CUresult(CUDAAPI* address_free)(CUdeviceptr, size_t);
  CUresult(CUDAAPI* release)(CUmemGenericAllocationHandle);
};

template <class Fn>
void look_up(Fn& fn, const char* symbol) {
  fn = reinterpret_cast<Fn>(driver_entry_point(symbol, "share_memory: vmm"));
}

const VmmCalls& vmm() {
  static const VmmCalls calls = [] {
    VmmCalls c{};
    look_up(c.error_name, "cuGetErrorName");
    look_up(c.device_attribute, "cuDeviceGetAttribute");
    look_up(c.granularity, "cuMemGetAllocationGranularity");
    look_up(c.create, "cuMemCreate");
    look_up(c.export_fd, "cuMemExportToShareableHandle");
    look_up(c.import_fd, "cuMemImportFromShareableHandle");
    look_up(c.reserve, "cuMemAddressReserve");
    look_up(c.map, "cuMemMap");
    look_up(c.set_access, "cuMemSetAccess");
    look_up(c.unmap, "cuMemUnmap");
    look_up(c.address_free, "cuMemAddressFree");
    look_up(c.release, "cuMemRelease");
    return c;
  }();
  return calls;
}

std::string cu_error(CUresult rc) {
  const char* name = nullptr;
  if (vmm().error_name(rc, &name) != CUDA_SUCCESS || !name) return "CUresult " + std::to_string(int(rc));
  return name;
}

void cu_ok(CUresult rc, const std::string& call) {
  if (rc != CUDA_SUCCESS) throw_error(__FILE__, __LINE__, call + " failed: " + cu_error(rc));
}

void cu_warn(CUresult rc, const char* call) {
  if (rc != CUDA_SUCCESS) warn_error(__FILE__, __LINE__, std::string(call) + " failed: " + cu_error(rc));
}

CUdeviceptr device_ptr(const char* p) { return CUdeviceptr(reinterpret_cast<uintptr_t>(p)); }

void require_vmm(int device) {
  int vmm_supported = 0, fd_supported = 0;
  cu_ok(vmm().device_attribute(&vmm_supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                               CUdevice(device)),
        "cuDeviceGetAttribute(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)");
  cu_ok(vmm().device_attribute(&fd_supported, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                               CUdevice(device)),
        "cuDeviceGetAttribute(HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED)");
  PB_CHECK(vmm_supported && fd_supported,
           "GPU " + std::to_string(device) + " cannot share memory through the CUDA virtual memory API (virtual "
           "memory management " + (vmm_supported ? "yes" : "no") + ", POSIX file descriptor handles " +
               (fd_supported ? "yes" : "no") + "); allowed instead: share_memory: ipc");
}

CUmemAllocationProp allocation_prop(int device) {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = device;
  p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return p;
}

int64_t device_granularity(const CUmemAllocationProp& prop) {
  size_t minimum = 0, recommended = 0;
  cu_ok(vmm().granularity(&minimum, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
        "cuMemGetAllocationGranularity(MINIMUM)");
  cu_ok(vmm().granularity(&recommended, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
        "cuMemGetAllocationGranularity(RECOMMENDED)");
  return region_granularity(int64_t(minimum), int64_t(recommended));
}

int my_rank(MPI_Comm comm) {
  int me = 0;
  mpi_ok(MPI_Comm_rank(comm, &me), "MPI_Comm_rank");
  return me;
}

}  // namespace

const char* share_mode_name(ShareMode m) { return m == ShareMode::vmm ? "vmm" : "ipc"; }

ShareMode share_mode_from_name(const std::string& name) {
  if (name == "vmm") return ShareMode::vmm;
  if (name == "ipc") return ShareMode::ipc;
  throw_error(__FILE__, __LINE__, "share_memory: '" + name + "' is not allowed; allowed values: vmm, ipc");
}

int64_t round_up(int64_t bytes, int64_t granularity) {
  PB_CHECK(granularity > 0 && bytes >= 0, "round_up: " + std::to_string(bytes) + " bytes to a granularity of " +
                                              std::to_string(granularity));
  return (bytes + granularity - 1) / granularity * granularity;
}

int64_t region_granularity(int64_t minimum, int64_t recommended) {
  PB_CHECK(minimum > 0, "region_granularity: the driver's minimum granularity is " + std::to_string(minimum));
  return round_up(std::max(recommended, kLargePage), minimum);
}

SharedRegion SharedRegion::share(ShareMode mode, int64_t bytes, MPI_Comm comm, int device, const std::string& what,
                                 double timeout_s) {
  PB_CHECK(bytes >= 0, "SharedRegion: negative size for " + what);
  if (bytes == 0) return {};
  PB_CUDA(cudaFree(nullptr));  // the runtime's context is current for the driver calls
  return mode == ShareMode::vmm ? share_vmm(bytes, comm, device, what, timeout_s) : share_ipc(bytes, comm, what);
}

SharedRegion SharedRegion::share_vmm(int64_t bytes, MPI_Comm comm, int device, const std::string& what,
                                     double timeout_s) {
  const int me = my_rank(comm);
  SharedRegion r;
  r.mode_ = ShareMode::vmm;
  r.exporter_ = me == 0;
  // Rank 0 creates, exports and maps; the others learn the size and granularity.
  UniqueFd exported;
  std::string problem;
  if (me == 0) {
    try {
      require_vmm(device);
      const CUmemAllocationProp prop = allocation_prop(device);
      r.granularity_ = device_granularity(prop);
      r.bytes_ = round_up(bytes, r.granularity_);
      CUmemGenericAllocationHandle handle = 0;
      const CUresult created = vmm().create(&handle, size_t(r.bytes_), &prop, 0);
      if (created == CUDA_ERROR_OUT_OF_MEMORY)
        throw_error(__FILE__, __LINE__, out_of_device_memory(what, size_t(r.bytes_)));
      cu_ok(created,
            "cuMemCreate(" + what + ", " + std::to_string(r.bytes_) + " bytes on GPU " + std::to_string(device) + ")");
      r.handle_ = handle;
      int fd = -1;
      cu_ok(vmm().export_fd(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            "cuMemExportToShareableHandle(" + what + ", POSIX file descriptor)");
      exported = UniqueFd(fd);
      r.map_vmm(device, what);
    } catch (const std::exception& e) {
      problem = e.what();
    }
  }
  throw_if_root_failed(problem, comm);
  int64_t shape[2] = {r.bytes_, r.granularity_};
  mpi_ok(MPI_Bcast(shape, 2, MPI_INT64_T, 0, comm), "MPI_Bcast(shared region size)");
  const UniqueFd received = share_fd(exported.get(), comm, timeout_s, what);
  if (me != 0) {
    r.bytes_ = shape[0];
    r.granularity_ = shape[1];
    CUmemGenericAllocationHandle handle = 0;
    cu_ok(vmm().import_fd(&handle, reinterpret_cast<void*>(uintptr_t(received.get())),
                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
          "cuMemImportFromShareableHandle(" + what + " of this GPU's first rank)");
    r.handle_ = handle;
    r.map_vmm(device, what);
  }
  return r;
}

void SharedRegion::map_vmm(int device, const std::string& what) {
  CUdeviceptr ptr = 0;
  cu_ok(vmm().reserve(&ptr, size_t(bytes_), size_t(granularity_), 0, 0),
        "cuMemAddressReserve(" + what + ", " + std::to_string(bytes_) + " bytes)");
  base_ = reinterpret_cast<char*>(uintptr_t(ptr));
  cu_ok(vmm().map(ptr, size_t(bytes_), 0, handle_, 0), "cuMemMap(" + what + ")");
  mapped_ = true;
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  cu_ok(vmm().set_access(ptr, size_t(bytes_), &access, 1), "cuMemSetAccess(" + what + ", read-write)");
}

SharedRegion SharedRegion::share_ipc(int64_t bytes, MPI_Comm comm, const std::string& what) {
  const int me = my_rank(comm);
  SharedRegion r;
  r.mode_ = ShareMode::ipc;
  r.exporter_ = me == 0;
  r.bytes_ = bytes;
  cudaIpcMemHandle_t handle{};
  std::string problem;
  if (me == 0) {
    try {
      void* base = device_allocate(size_t(bytes), what);
      r.base_ = static_cast<char*>(base);
      PB_CUDA(cudaIpcGetMemHandle(&handle, base));
    } catch (const std::exception& e) {
      problem = e.what();
    }
  }
  throw_if_root_failed(problem, comm);
  mpi_ok(MPI_Bcast(&handle, int(sizeof handle), MPI_BYTE, 0, comm), "MPI_Bcast(IPC handle)");
  if (me != 0) {
    void* base = nullptr;
    const cudaError_t rc = cudaIpcOpenMemHandle(&base, handle, cudaIpcMemLazyEnablePeerAccess);
    PB_CHECK(rc == cudaSuccess, "cudaIpcOpenMemHandle(" + what + " of this GPU's first rank): " +
                                    cudaGetErrorName(rc) + " (" + cudaGetErrorString(rc) + ")");
    r.base_ = static_cast<char*>(base);
  }
  return r;
}

SharedRegion::SharedRegion(SharedRegion&& o) noexcept { *this = std::move(o); }

SharedRegion& SharedRegion::operator=(SharedRegion&& o) noexcept {
  if (this != &o) {
    release();
    mode_ = o.mode_;
    exporter_ = o.exporter_;
    base_ = o.base_;
    bytes_ = o.bytes_;
    granularity_ = o.granularity_;
    handle_ = o.handle_;
    mapped_ = o.mapped_;
    o.abandon();
  }
  return *this;
}

void SharedRegion::release() noexcept {
  if (mode_ == ShareMode::ipc && base_) {
    if (exporter_) PB_CUDA_NOTHROW(cudaFree(base_));
    else PB_CUDA_NOTHROW(cudaIpcCloseMemHandle(base_));
  }
  if (mode_ == ShareMode::vmm) {
    if (mapped_) cu_warn(vmm().unmap(device_ptr(base_), size_t(bytes_)), "cuMemUnmap");
    if (base_) cu_warn(vmm().address_free(device_ptr(base_), size_t(bytes_)), "cuMemAddressFree");
    if (handle_) cu_warn(vmm().release(CUmemGenericAllocationHandle(handle_)), "cuMemRelease");
  }
  abandon();
}

void SharedRegion::abandon() noexcept {
  mode_ = ShareMode::vmm;
  exporter_ = false;
  base_ = nullptr;
  bytes_ = granularity_ = 0;
  handle_ = 0;
  mapped_ = false;
}

}  // namespace pb
