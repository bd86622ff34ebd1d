#include "backend/cuda/comm/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <numeric>

#include <fmt/format.h>

#include "backend/cuda/common/check.h"

namespace rill::cuda {

namespace {

void disable_nvls() {
  // Before any communicator exists: NCCL reads it at init. Overwritten on purpose (spec/parallelism.md §5).
  static std::once_flag once;
  std::call_once(once, [] { setenv("NCCL_NVLS_ENABLE", "0", 1); });
}

Result<ncclDataType_t> nccl_type(DType t) {
  switch (t) {
    case DType::F32:
      return ncclFloat32;
    case DType::BF16:
      return ncclBfloat16;
    default:
      return invalid_argument("nccl: no sum over {}", dtype_name(t));
  }
}

cudaStream_t as_stream(void* s) {
  return static_cast<cudaStream_t>(s);
}

}  // namespace

#define RILL_NCCL_TRY(call)                                          \
  do {                                                               \
    const ncclResult_t rill_nccl_ = (call);                          \
    if (rill_nccl_ != ncclSuccess) return failed(#call, rill_nccl_); \
  } while (0)

Result<NcclUniqueId> nccl_unique_id() {
  disable_nvls();
  ncclUniqueId id;
  if (const ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
    return unavailable("ncclGetUniqueId failed: {}", ncclGetErrorString(r));
  }
  static_assert(sizeof(id) == sizeof(NcclUniqueId::bytes));
  NcclUniqueId out;
  std::memcpy(out.bytes.data(), &id, sizeof(id));
  return out;
}

NcclCommunicator::NcclCommunicator(ncclComm* comm, int rank, int size, int device, void* stream)
    : Communicator(rank, size, Device::Cuda), comm_(comm), device_(device), stream_(stream) {}

Result<std::unique_ptr<NcclCommunicator>> NcclCommunicator::make(const NcclUniqueId& id, int world, int rank,
                                                                 int device, void* stream) {
  disable_nvls();
  if (world < 1 || rank < 0 || rank >= world)
    return invalid_argument("nccl: rank {} of a world of {}", rank, world);
  RILL_CUDA_CHECK(cudaSetDevice(device));
  ncclUniqueId nid;
  std::memcpy(&nid, id.bytes.data(), sizeof(nid));
  ncclComm_t comm = nullptr;
  if (const ncclResult_t r = ncclCommInitRank(&comm, world, nid, rank); r != ncclSuccess) {
    if (comm != nullptr) ncclCommAbort(comm);
    return unavailable("ncclCommInitRank (rank {} of {}, GPU {}) failed: {} ({})", rank, world, device,
                       ncclGetErrorString(r), ncclGetLastError(nullptr));
  }
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(comm, rank, world, device, stream));
}

NcclCommunicator::~NcclCommunicator() {
  cudaSetDevice(device_);
  if (scratch_ != nullptr) {
    cudaStreamSynchronize(as_stream(stream_));
    cudaFree(scratch_);
  }
  if (aborted_.load()) return;  // ncclCommAbort already freed it
  ncclCommFinalize(comm_);
  ncclCommDestroy(comm_);
}

Result<std::unique_ptr<NcclCommunicator>> NcclCommunicator::split(int color, int key, void* stream) {
  RILL_TRY(usable());
  RILL_CUDA_CHECK(cudaSetDevice(device_));
  ncclComm_t sub = nullptr;
  RILL_NCCL_TRY(ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &sub, nullptr));
  if (sub == nullptr) return invalid_argument("nccl split: rank {} passed no colour", rank());
  int n = 0, r = 0;
  ncclCommCount(sub, &n);
  ncclCommUserRank(sub, &r);
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(sub, r, n, device_, stream));
}

void NcclCommunicator::abort(const std::string& reason) {
  {
    std::lock_guard lock(error_mu_);
    if (aborted_.load()) return;
    error_ = reason;
    aborted_.store(true);
  }
  ncclCommAbort(comm_);
}

Status NcclCommunicator::failed(const char* call, int result) {
  std::string message = fmt::format("{} failed on {}: {} ({})", call, describe(),
                                    ncclGetErrorString(ncclResult_t(result)), ncclGetLastError(comm_));
  abort(message);
  return unavailable("{}", error());
}

Status NcclCommunicator::usable() const {
  if (aborted_.load()) return unavailable("nccl communicator aborted: {}", error());
  return {};
}

std::string NcclCommunicator::error() const {
  std::lock_guard lock(error_mu_);
  return error_;
}

Status NcclCommunicator::check_async() {
  RILL_TRY(usable());
  ncclResult_t async = ncclSuccess;
  RILL_NCCL_TRY(ncclCommGetAsyncError(comm_, &async));
  if (async != ncclSuccess && async != ncclInProgress) return failed("asynchronous NCCL operation", async);
  return {};
}

std::string NcclCommunicator::describe() const {
  return fmt::format("nccl communicator, rank {} of {} (GPU {})", rank(), size(), device_);
}

Status NcclCommunicator::scratch(size_t nbytes) {
  if (nbytes <= scratch_bytes_) return {};
  if (scratch_ != nullptr) {
    RILL_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream_)));
    RILL_CUDA_CHECK(cudaFree(scratch_));
    scratch_ = nullptr;
  }
  RILL_CUDA_CHECK(cudaMalloc(&scratch_, nbytes));
  scratch_bytes_ = nbytes;
  return {};
}

Status NcclCommunicator::all_reduce_sum_impl(const TensorView& in, const TensorView& out) {
  RILL_TRY(usable());
  RILL_ASSIGN_OR_RETURN(ncclDataType_t t, nccl_type(in.dtype));
  RILL_NCCL_TRY(ncclAllReduce(in.data, out.data, size_t(in.numel()), t, ncclSum, comm_, as_stream(stream_)));
  return {};
}

Status NcclCommunicator::all_gather_impl(const TensorView& in, const TensorView& out) {
  RILL_TRY(usable());
  RILL_NCCL_TRY(ncclAllGather(in.data, out.data, in.nbytes(), ncclUint8, comm_, as_stream(stream_)));
  return {};
}

Status NcclCommunicator::reduce_scatter_impl(const TensorView& in, const TensorView& out) {
  RILL_TRY(usable());
  RILL_ASSIGN_OR_RETURN(ncclDataType_t t, nccl_type(in.dtype));
  RILL_NCCL_TRY(
      ncclReduceScatter(in.data, out.data, size_t(out.numel()), t, ncclSum, comm_, as_stream(stream_)));
  return {};
}

Status NcclCommunicator::all_to_all_v_impl(const TensorView& in, std::span<const int64_t> send_rows,
                                           const TensorView& out, std::span<const int64_t> recv_rows) {
  RILL_TRY(usable());
  const size_t row = dist::row_bytes(in);
  const auto* src = static_cast<const uint8_t*>(in.data);
  auto* dst = static_cast<uint8_t*>(out.data);
  // This rank's own rows by a device copy; NCCL's self send/recv would work too but costs a channel.
  const int64_t self_send = std::accumulate(send_rows.begin(), send_rows.begin() + rank(), int64_t(0));
  const int64_t self_recv = std::accumulate(recv_rows.begin(), recv_rows.begin() + rank(), int64_t(0));
  if (send_rows[rank()] != recv_rows[rank()]) {
    return invalid_argument("all_to_all_v: rank {} sends itself {} rows but expects {}", rank(),
                            send_rows[rank()], recv_rows[rank()]);
  }
  RILL_CUDA_CHECK(cudaSetDevice(device_));
  if (send_rows[rank()] > 0) {
    RILL_CUDA_CHECK(cudaMemcpyAsync(dst + self_recv * row, src + self_send * row, send_rows[rank()] * row,
                                    cudaMemcpyDeviceToDevice, as_stream(stream_)));
  }
  RILL_NCCL_TRY(ncclGroupStart());
  int64_t send_off = 0, recv_off = 0;
  for (int j = 0; j < size(); ++j) {
    if (j != rank() && send_rows[j] > 0) {
      RILL_NCCL_TRY(
          ncclSend(src + send_off * row, send_rows[j] * row, ncclUint8, j, comm_, as_stream(stream_)));
    }
    if (j != rank() && recv_rows[j] > 0) {
      RILL_NCCL_TRY(
          ncclRecv(dst + recv_off * row, recv_rows[j] * row, ncclUint8, j, comm_, as_stream(stream_)));
    }
    send_off += send_rows[j];
    recv_off += recv_rows[j];
  }
  RILL_NCCL_TRY(ncclGroupEnd());
  return {};
}

Status NcclCommunicator::send_impl(const TensorView& in, int peer) {
  RILL_TRY(usable());
  RILL_NCCL_TRY(ncclSend(in.data, in.nbytes(), ncclUint8, peer, comm_, as_stream(stream_)));
  return {};
}

Status NcclCommunicator::recv_impl(const TensorView& out, int peer) {
  RILL_TRY(usable());
  RILL_NCCL_TRY(ncclRecv(out.data, out.nbytes(), ncclUint8, peer, comm_, as_stream(stream_)));
  return {};
}

Status NcclCommunicator::broadcast_impl(const TensorView& data, int root) {
  RILL_TRY(usable());
  RILL_NCCL_TRY(
      ncclBroadcast(data.data, data.data, data.nbytes(), ncclUint8, root, comm_, as_stream(stream_)));
  return {};
}

// The length first, then the bytes, through a device scratch; synchronous (the host needs the bytes).
Status NcclCommunicator::broadcast_bytes_impl(std::vector<uint8_t>& bytes, int root) {
  RILL_TRY(usable());
  RILL_CUDA_CHECK(cudaSetDevice(device_));
  const cudaStream_t s = as_stream(stream_);
  uint64_t n = bytes.size();
  RILL_TRY(scratch(sizeof(uint64_t)));
  RILL_CUDA_CHECK(cudaMemcpyAsync(scratch_, &n, sizeof n, cudaMemcpyHostToDevice, s));
  RILL_NCCL_TRY(ncclBroadcast(scratch_, scratch_, sizeof n, ncclUint8, root, comm_, s));
  RILL_CUDA_CHECK(cudaMemcpyAsync(&n, scratch_, sizeof n, cudaMemcpyDeviceToHost, s));
  RILL_CUDA_CHECK(cudaStreamSynchronize(s));
  if (n == 0) {
    bytes.clear();
    return {};
  }
  RILL_TRY(scratch(n));
  if (rank() == root) RILL_CUDA_CHECK(cudaMemcpyAsync(scratch_, bytes.data(), n, cudaMemcpyHostToDevice, s));
  RILL_NCCL_TRY(ncclBroadcast(scratch_, scratch_, n, ncclUint8, root, comm_, s));
  bytes.resize(n);
  RILL_CUDA_CHECK(cudaMemcpyAsync(bytes.data(), scratch_, n, cudaMemcpyDeviceToHost, s));
  RILL_CUDA_CHECK(cudaStreamSynchronize(s));
  return {};
}

Status NcclCommunicator::barrier_impl() {
  RILL_TRY(usable());
  RILL_CUDA_CHECK(cudaSetDevice(device_));
  RILL_TRY(scratch(sizeof(float)));
  RILL_NCCL_TRY(ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, as_stream(stream_)));
  RILL_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream_)));
  return {};
}

}  // namespace rill::cuda
