//===- VmmRegion.cpp - Device regions whose memory can be returned --------===//
#include "VmmRegion.h"

#include "weft/exec/Error.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>

namespace weft::exec::cuda {

namespace {

/// The driver entry points, resolved through the runtime so the backend does
/// not link libcuda (binaries still start where no driver is installed).
struct Driver {
  decltype(&cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&cuMemAddressReserve) reserve = nullptr;
  decltype(&cuMemAddressFree) addressFree = nullptr;
  decltype(&cuMemCreate) create = nullptr;
  decltype(&cuMemRelease) release = nullptr;
  decltype(&cuMemMap) map = nullptr;
  decltype(&cuMemUnmap) unmap = nullptr;
  decltype(&cuMemSetAccess) setAccess = nullptr;
  decltype(&cuDeviceGetAttribute) attribute = nullptr;
  decltype(&cuGetErrorString) errorString = nullptr;
  decltype(&cuGetErrorName) errorName = nullptr;
  std::string missing; // the first entry point not found

  Driver() {
    load("cuMemGetAllocationGranularity", granularity);
    load("cuMemAddressReserve", reserve);
    load("cuMemAddressFree", addressFree);
    load("cuMemCreate", create);
    load("cuMemRelease", release);
    load("cuMemMap", map);
    load("cuMemUnmap", unmap);
    load("cuMemSetAccess", setAccess);
    load("cuDeviceGetAttribute", attribute);
    load("cuGetErrorString", errorString);
    load("cuGetErrorName", errorName);
  }
  template <typename F> void load(const char *name, F &function) {
    void *address = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion(
            name, &address, 12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess || !address) {
      cudaGetLastError(); // clear the sticky-free error
      if (missing.empty())
        missing = name;
      return;
    }
    function = reinterpret_cast<F>(address);
  }
  /// "cuMemCreate: CUDA_ERROR_OUT_OF_MEMORY (out of memory)".
  std::string describe(CUresult result, const char *call) const {
    const char *name = nullptr, *text = nullptr;
    if (errorName)
      errorName(result, &name);
    if (errorString)
      errorString(result, &text);
    std::string what = name ? name : "error " + std::to_string(result);
    return std::string(call) + ": " + what +
           (text ? " (" + std::string(text) + ")" : "");
  }
};

const Driver &driver() {
  static const Driver instance;
  return instance;
}

CUmemAllocationProp deviceProp(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

} // namespace

std::unique_ptr<VmmRegion> VmmRegion::create(int device, int64_t bytes,
                                             std::string &why) {
  const Driver &d = driver();
  if (!d.missing.empty()) {
    why = "the driver has no " + d.missing;
    return nullptr;
  }
  int supported = 0;
  CUresult result = d.attribute(
      &supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
      CUdevice(device));
  if (result != CUDA_SUCCESS || !supported) {
    why = result != CUDA_SUCCESS ? d.describe(result, "cuDeviceGetAttribute")
                                 : "the device has no virtual memory "
                                   "management";
    return nullptr;
  }
  CUmemAllocationProp prop = deviceProp(device);
  size_t granularity = 0;
  result =
      d.granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  if (result != CUDA_SUCCESS || granularity == 0) {
    why = d.describe(result, "cuMemGetAllocationGranularity");
    return nullptr;
  }
  // At most ~4096 chunks per region (one physical allocation each), at
  // least the driver's granularity: group boundaries cost at most a chunk.
  size_t want = size_t(std::max<int64_t>(bytes, 1));
  size_t chunk = std::max(granularity, (want / 4096 + granularity - 1) /
                                           granularity * granularity);
  size_t chunks = (want + chunk - 1) / chunk;
  std::unique_ptr<VmmRegion> region(new VmmRegion());
  region->device_ = device;
  region->chunk_ = chunk;
  region->size_ = chunks * chunk;
  // The reserve's alignment must be a power of two (cuda.h): the
  // granularity is one, a chunk (a multiple of it) need not be; chunk
  // starts are multiples of the granularity either way, as cuMemMap needs.
  size_t alignment = (granularity & (granularity - 1)) == 0 ? granularity : 0;
  result = d.reserve(&region->base_, region->size_, alignment, 0, 0);
  if (result != CUDA_SUCCESS) {
    region->base_ = 0;
    why = d.describe(result, "cuMemAddressReserve");
    return nullptr;
  }
  region->handles_.assign(chunks, 0);
  for (size_t i = 0; i < chunks; ++i)
    if (std::string error = region->map(i); !error.empty()) {
      why = error;
      return nullptr; // the destructor unmaps what was mapped
    }
  return region;
}

VmmRegion::~VmmRegion() {
  const Driver &d = driver();
  for (size_t i = 0; i < handles_.size(); ++i)
    if (handles_[i])
      unmap(i);
  if (base_)
    d.addressFree(base_, size_);
}

int64_t VmmRegion::committedBytes() const {
  return int64_t(std::count_if(handles_.begin(), handles_.end(),
                               [](unsigned long long h) { return h != 0; })) *
         int64_t(chunk_);
}

std::string VmmRegion::map(size_t i) {
  const Driver &d = driver();
  CUmemAllocationProp prop = deviceProp(device_);
  CUmemGenericAllocationHandle handle = 0;
  CUresult result = d.create(&handle, chunk_, &prop, 0);
  if (result != CUDA_SUCCESS)
    return d.describe(result, "cuMemCreate");
  CUdeviceptr at = base_ + i * chunk_;
  result = d.map(at, chunk_, 0, handle, 0);
  if (result != CUDA_SUCCESS) {
    d.release(handle);
    return d.describe(result, "cuMemMap");
  }
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device_;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  result = d.setAccess(at, chunk_, &access, 1);
  if (result != CUDA_SUCCESS) {
    d.unmap(at, chunk_);
    d.release(handle);
    return d.describe(result, "cuMemSetAccess");
  }
  handles_[i] = handle;
  return "";
}

std::string VmmRegion::unmap(size_t i) {
  const Driver &d = driver();
  CUresult result = d.unmap(base_ + i * chunk_, chunk_);
  if (result != CUDA_SUCCESS)
    return d.describe(result, "cuMemUnmap");
  result = d.release(handles_[i]);
  // Unmapped either way: a failed release leaks the allocation, but the
  // chunk counts as not backed, so recommit backs it anew.
  handles_[i] = 0;
  if (result != CUDA_SUCCESS)
    return d.describe(result, "cuMemRelease");
  return "";
}

int64_t VmmRegion::decommit(std::byte *p, int64_t bytes) {
  size_t begin = size_t(p - data()), end = begin + size_t(bytes);
  size_t first = (begin + chunk_ - 1) / chunk_, last = end / chunk_;
  int64_t released = 0;
  for (size_t i = first; i < last && i < handles_.size(); ++i) {
    if (!handles_[i])
      continue;
    if (std::string error = unmap(i); !error.empty()) {
      // Leave the range usable: back what this call released again (and
      // say so if that fails too).
      std::string again;
      try {
        recommit(p, bytes);
      } catch (const Error &e) {
        again = "; then " + std::string(e.what());
      }
      throw Error("cannot release " + std::to_string(chunk_) +
                  " bytes of device memory: " + error + again);
    }
    released += int64_t(chunk_);
  }
  return released;
}

int64_t VmmRegion::recommit(std::byte *p, int64_t bytes) {
  size_t begin = size_t(p - data()), end = begin + size_t(bytes);
  int64_t backed = 0;
  for (size_t i = begin / chunk_; i * chunk_ < end && i < handles_.size();
       ++i) {
    if (handles_[i])
      continue;
    if (std::string error = map(i); !error.empty())
      throw Error("cannot back " + std::to_string(chunk_) +
                  " bytes of device memory again: " + error);
    backed += int64_t(chunk_);
  }
  return backed;
}

} // namespace weft::exec::cuda
