//===- VmmRegion.h - Device regions whose memory can be returned -*- C++
//-*-===//
//
// A device region on the CUDA driver's virtual memory management API: the
// address range is reserved once and backed by physical chunks, so offload
// (docs/runtime.md, "Offload") can release the chunks a state group covers
// and back them again later at the same addresses (kernel arguments stay
// valid; the backend drops a captured step graph first, since NCCL may have
// registered the old chunks for it). A cudaMalloc allocation cannot be partly
// returned, which is why the backend prefers this where the device has it.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_EXEC_CUDA_VMMREGION_H
#define WEFT_EXEC_CUDA_VMMREGION_H

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace weft::exec::cuda {

class VmmRegion {
public:
  /// Reserves and backs `bytes` on `device`. Returns null with `why` set
  /// when the driver or the device has no virtual memory management or a
  /// call fails; nothing stays allocated then, and the caller falls back to
  /// cudaMalloc.
  static std::unique_ptr<VmmRegion> create(int device, int64_t bytes,
                                           std::string &why);
  ~VmmRegion();
  VmmRegion(const VmmRegion &) = delete;
  VmmRegion &operator=(const VmmRegion &) = delete;

  std::byte *data() const { return reinterpret_cast<std::byte *>(base_); }
  bool contains(const std::byte *p, int64_t bytes) const {
    return p >= data() && p + bytes <= data() + size_;
  }
  /// Bytes of physical memory currently backing the region.
  int64_t committedBytes() const;

  /// Releases every chunk that lies wholly inside [p, p + bytes) (the device
  /// must be idle); returns the bytes released. Throws weft::exec::Error on
  /// a driver failure, with the range still backed.
  int64_t decommit(std::byte *p, int64_t bytes);
  /// Backs the released chunks that overlap [p, p + bytes) again (contents
  /// unspecified); returns the bytes backed. Throws weft::exec::Error on a
  /// driver failure.
  int64_t recommit(std::byte *p, int64_t bytes);

private:
  VmmRegion() = default;
  /// Backs chunk `i` with fresh physical memory and makes it accessible.
  std::string map(size_t i);
  /// Unmaps and releases chunk `i`.
  std::string unmap(size_t i);

  int device_ = -1;
  unsigned long long base_ = 0; // CUdeviceptr
  size_t size_ = 0;             // reserved bytes: chunks * chunk_
  size_t chunk_ = 0;
  /// The physical allocation of each chunk (0: released).
  std::vector<unsigned long long> handles_;
};

} // namespace weft::exec::cuda

#endif // WEFT_EXEC_CUDA_VMMREGION_H
