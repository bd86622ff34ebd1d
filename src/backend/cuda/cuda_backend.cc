#include "backend/cuda/cuda_backend.h"

#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <thread>
#include <vector>

#include "backend/cuda/attn_res.h"
#include "backend/cuda/common/align.h"
#include "backend/cuda/common/check.h"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/gemm/fp8_dequant.h"
#include "backend/cuda/gemm/fp8_quantize.h"
#include "backend/cuda/gemm/fp8_native.h"
#include "backend/cuda/gemm/gemm_runner.h"
#include "backend/cuda/gemm/gemv.h"
#include "backend/cuda/kda/config.h"
#include "backend/cuda/kda/kda.h"
#include "backend/cuda/make_cuda_backend.h"
#include "backend/cuda/mla/cudnn_sdpa.h"
#include "backend/cuda/mla/mla.h"
#include "backend/cuda/mla/params.h"
#include "backend/cuda/moe/cublas_grouped.h"
#include "backend/cuda/moe/moe.h"
#include "backend/cuda/moe/params.h"
#include "backend/cuda/norm.h"
#include "backend/cuda/sample.h"
#include "core/sizes.h"

namespace rill::cuda {
namespace {

constexpr size_t kPinnedBytes = 8 << 20;  // staging ring for step metadata (two halves)
constexpr size_t kHalf = kPinnedBytes / 2;
// Host tier batches whose timing events stay unread (CudaBackend::read_tier_timings): older ones passed long
// ago, since every step waits for its sampled tokens.
constexpr size_t kTierTimingsKept = 64;

}  // namespace

Result<std::unique_ptr<CudaBackend>> CudaBackend::create(int device,
                                                         const backend::CudaBackendOptions& options) {
  int count = 0;
  // Any failure here (no driver, insufficient driver, no device) means "no GPU" (design.md §6).
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0)
    return unavailable("no usable CUDA GPU ({})", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
  // (The CLI adds CUDA_VISIBLE_DEVICES to this message: cli/common.cc; the environment is not read here.)
  if (device < 0 || device >= count)
    return invalid_argument("device cuda:{} does not exist: {} CUDA device{} visible (cuda:0{})", device,
                            count, count == 1 ? " is" : "s are",
                            count > 1 ? fmt::format("..cuda:{}", count - 1) : "");
  std::unique_ptr<CudaBackend> b(new CudaBackend());
  RILL_CUDA_CHECK(cudaSetDevice(device));
  b->ctx_.device = device;
  b->ctx_.options = options;
  RILL_CUDA_CHECK(cudaDeviceGetAttribute(&b->ctx_.sm_count, cudaDevAttrMultiProcessorCount, device));
  RILL_CUDA_CHECK(cudaDeviceGetAttribute(&b->ctx_.cc_major, cudaDevAttrComputeCapabilityMajor, device));
  RILL_CUDA_CHECK(cudaDeviceGetAttribute(&b->ctx_.cc_minor, cudaDevAttrComputeCapabilityMinor, device));
  int smem = 0;
  RILL_CUDA_CHECK(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  b->ctx_.max_smem_per_block = size_t(smem);
  RILL_CUDA_CHECK(cudaStreamCreateWithFlags(&b->ctx_.stream, cudaStreamNonBlocking));
  if (!options.pdl) set_stream_pdl(b->ctx_.stream, false);
  RILL_CUDA_CHECK(cudaMallocHost(&b->pinned_, kPinnedBytes));
  for (auto& ev : b->pinned_free_) RILL_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  RILL_ASSIGN_OR_RETURN(b->gemm_, GemmRunner::create(device));
  b->ctx_.gemm = b->gemm_.get();
  b->gemm_->set_autotune(options.gemm_autotune);
  b->gemm_->set_fp8_native(options.fp8_gemm_native);
  RILL_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&b->ctx_.route_logits),
                             size_t(moe::kRouteLogitsFloats) * sizeof(float)));
  RILL_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&b->ctx_.gemv_counter), sizeof(unsigned)));
  RILL_CUDA_CHECK(cudaMemset(b->ctx_.gemv_counter, 0, sizeof(unsigned)));
  RILL_ASSIGN_OR_RETURN(b->moe_grouped_, moe::CublasGroupedGemm::create(moe::kMaxExperts));
  b->ctx_.moe_grouped_gemm = b->moe_grouped_.get();
  // Resolves the driver's TMA encoder now (moe_wgmma), so no lookup happens inside a graph capture.
  (void)moe_wgmma_available(b->ctx_);
  // cuDNN's fused attention for MLA prefill: no cuDNN call until a prefill step uses it.
  auto sdpa = mla::CudnnSdpa::create(device);
  if (sdpa.ok()) {
    b->mla_sdpa_ = std::move(sdpa).value();
    b->ctx_.mla_sdpa = b->mla_sdpa_.get();
  } else if (options.mla_prefill == backend::MlaPrefillPath::Cudnn) {
    return invalid_argument("backend option mla_prefill=cudnn: {}", sdpa.status().message());
  }
  return b;
}

Status CudaBackend::set_option(const std::string& key, const std::string& value) {
  // Only switches that change neither a step's planned scratch nor the stream's launch attributes may change
  // after the backend is made; the rest are fixed by make_cuda_backend's options (--backend-option).
  // (fp8_gemm and mla_prefill change a step's planned scratch: tests and the benchmark set them before planning.)
  if (key != "moe_cublas_grouped" && key != "moe_cublas_min_pairs" && key != "moe_wgmma" &&
      key != "moe_route_gemm_min_tokens" && key != "moe_wgmma_mxfp4_min_pairs" && key != "moe_wgmma_fp8" &&
      key != "moe_wgmma_mxfp4" && key != "kda_intra_tensor_solve" && key != "fp8_gemm" &&
      key != "mla_prefill")
    return invalid_argument("backend option {} is fixed when the backend is made (--backend-option {}={})", key,
                            key, value);
  if (key == "mla_prefill" && value == "cudnn" && !mla_sdpa_)
    return unavailable("backend option mla_prefill=cudnn: this build has no cuDNN (RILL_CUDNN)");
  backend::CudaBackendOptions next = ctx_.options;
  RILL_TRY(backend::set_cuda_backend_option(next, key + "=" + value));
  // Refused where it cannot run, so a test or benchmark row that asks for it is skipped instead of measuring
  // another path under its name (made with the option on, such a backend falls back silently).
  if (((key == "moe_wgmma" && next.moe_wgmma) || (key == "moe_wgmma_fp8" && next.moe_wgmma_fp8) ||
       (key == "moe_wgmma_mxfp4" && next.moe_wgmma_mxfp4)) &&
      !moe_wgmma_available(ctx_))
    return unavailable(
        "backend option {}: needs an sm_90 device, sm_90a in RILL_CUDA_ARCHS and a driver "
        "with TMA (this device is sm_{}{})",
        key, ctx_.cc_major, ctx_.cc_minor);
  ctx_.options = next;
  gemm_->set_fp8_native(ctx_.options.fp8_gemm_native);
  return {};
}

backend::KernelShapeLimits CudaBackend::shape_limits() const {
  backend::KernelShapeLimits l;
  l.kda_head_dim = kda::kHeadDim;
  l.kda_conv_kernel = kda::kConvTaps;
  l.mla_nope = mla::kNope;
  l.mla_rope = mla::kRope;
  l.mla_v = mla::kV;
  l.mla_kv_lora = mla::kLora;
  l.max_experts = moe::kMaxExperts;
  l.max_groups = moe::kRouteMaxGroups;
  l.max_attn_res_candidates = kAttnResMaxCandidates;
  return l;
}

Status CudaBackend::bind_thread() {
  RILL_CUDA_CHECK(cudaSetDevice(ctx_.device));
  return {};
}

CudaBackend::~CudaBackend() {
  if (ctx_.stream) cudaStreamSynchronize(ctx_.stream);
  if (tier_stream_) cudaStreamSynchronize(tier_stream_);
  for (const TierBatchTiming& t : tier_timings_)
    for (cudaEvent_t e : {t.start, t.end})
      if (e) cudaEventDestroy(e);
  for (cudaEvent_t e : tier_free_events_) cudaEventDestroy(e);
  if (tier_ready_) cudaEventDestroy(tier_ready_);
  if (tier_done_) cudaEventDestroy(tier_done_);
  if (tier_stream_) cudaStreamDestroy(tier_stream_);
  gemm_.reset();
  moe_grouped_.reset();
  mla_sdpa_.reset();
  for (auto& ev : pinned_free_)
    if (ev) cudaEventDestroy(ev);
  if (pinned_) cudaFreeHost(pinned_);
  if (layout_dev_) cudaFree(layout_dev_);
  if (ctx_.route_logits) cudaFree(ctx_.route_logits);
  if (ctx_.gemv_counter) cudaFree(ctx_.gemv_counter);
  if (ctx_.stream) {
    set_stream_pdl(ctx_.stream, true);  // forget the stream: CUDA may hand its handle out again
    cudaStreamDestroy(ctx_.stream);
  }
}

Result<backend::DeviceAllocation> CudaBackend::allocate(size_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error state of a failed allocation
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    return resource_exhausted("cannot allocate {:.2f} GiB on the GPU ({:.2f} GiB free of {:.2f} GiB): {}",
                              double(bytes) / (1 << 30), double(free_b) / (1 << 30),
                              double(total_b) / (1 << 30), cudaGetErrorString(e));
  }
  std::shared_ptr<void> owner(p, [](void* q) { cudaFree(q); });
  return backend::DeviceAllocation(p, bytes, std::move(owner));
}

std::string CudaBackend::device_description() const {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, ctx_.device) != cudaSuccess) return name();
  return fmt::format("{} {} ({:.1f} GiB, sm_{}{}, {} SMs)", name(), prop.name,
                     double(prop.totalGlobalMem) / (1 << 30), prop.major, prop.minor,
                     prop.multiProcessorCount);
}

std::optional<std::pair<size_t, size_t>> CudaBackend::device_memory() const {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return std::nullopt;
  return std::pair{free_b, total_b};
}

Status CudaBackend::copy_to_device(void* dst, const void* host_src, size_t bytes) {
  RILL_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, ctx_.stream));
  RILL_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
  return {};
}

Status CudaBackend::copy_to_host(void* host_dst, const void* src, size_t bytes) {
  RILL_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, ctx_.stream));
  RILL_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
  return {};
}

Result<backend::DeviceAllocation> CudaBackend::allocate_host(size_t bytes) {
  if (const auto available = backend::host_available_memory(); available && bytes > *available)
    return resource_exhausted("{} of host memory asked for, {} available", format_bytes(double(bytes)),
                              format_bytes(double(*available)));
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return resource_exhausted("cannot pin {} of host memory (cudaHostAlloc: {}; see ulimit -l)",
                              format_bytes(double(bytes)), cudaGetErrorString(e));
  }
  std::shared_ptr<void> owner(p, [](void* q) { cudaFreeHost(q); });
  return backend::DeviceAllocation(p, bytes, std::move(owner));
}

// The host tier's copies go on a stream of their own: it starts after the compute stream's work so far (the
// blocks and snapshots it reads were written there) and the compute stream's next work waits for it (a block
// offloaded is written by the next step; a block brought back is read by it). The host never waits.
Status CudaBackend::copy_host_tier_batch(const std::vector<backend::HostCopy>& copies) {
  if (copies.empty()) return {};
  if (!tier_stream_) {
    RILL_CUDA_CHECK(cudaStreamCreateWithFlags(&tier_stream_, cudaStreamNonBlocking));
    RILL_CUDA_CHECK(cudaEventCreateWithFlags(&tier_ready_, cudaEventDisableTiming));
    RILL_CUDA_CHECK(cudaEventCreateWithFlags(&tier_done_, cudaEventDisableTiming));
  }
  std::lock_guard lock(tier_timing_mu_);
  // Every step synchronises, so timings this old passed long ago: reading them does not wait.
  read_tier_timings(kTierTimingsKept);
  TierBatchTiming t;
  for (cudaEvent_t* e : {&t.start, &t.end}) {
    if (!tier_free_events_.empty()) {
      *e = tier_free_events_.back();
      tier_free_events_.pop_back();
    } else {
      RILL_CUDA_CHECK(cudaEventCreate(e));
    }
  }
  tier_timings_.push_back(t);  // before anything can fail: the events are returned by read_tier_timings
  RILL_CUDA_CHECK(cudaEventRecord(tier_ready_, ctx_.stream));
  RILL_CUDA_CHECK(cudaStreamWaitEvent(tier_stream_, tier_ready_, 0));
  RILL_CUDA_CHECK(cudaEventRecord(t.start, tier_stream_));
  for (const backend::HostCopy& c : copies) {
    RILL_CUDA_CHECK(cudaMemcpyAsync(c.dst, c.src, c.bytes, c.to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
                                    tier_stream_));
    (c.to_host ? tier_timings_.back().to_host : tier_timings_.back().to_device) += c.bytes;
  }
  RILL_CUDA_CHECK(cudaEventRecord(t.end, tier_stream_));
  RILL_CUDA_CHECK(cudaEventRecord(tier_done_, tier_stream_));
  RILL_CUDA_CHECK(cudaStreamWaitEvent(ctx_.stream, tier_done_, 0));
  return {};
}

void CudaBackend::read_tier_timings(size_t keep) {
  while (tier_timings_.size() > keep) {
    const TierBatchTiming t = tier_timings_.front();
    tier_timings_.pop_front();
    float ms = 0;
    const bool timed = cudaEventSynchronize(t.end) == cudaSuccess &&
                       cudaEventElapsedTime(&ms, t.start, t.end) == cudaSuccess;
    tier_free_events_.push_back(t.start);
    tier_free_events_.push_back(t.end);
    if (!timed) {          // a batch whose copies failed before its events were recorded: not counted
      cudaGetLastError();  // (this thread's next launch check must not see it)
      continue;
    }
    tier_totals_.bytes_to_host += t.to_host;
    tier_totals_.bytes_to_device += t.to_device;
    tier_totals_.batches++;
    tier_totals_.seconds += double(ms) * 1e-3;
  }
}

backend::HostTierCopyTotals CudaBackend::host_tier_copy_totals() {
  std::lock_guard lock(tier_timing_mu_);
  read_tier_timings(0);
  return tier_totals_;
}

Status CudaBackend::copy_device_to_device(void* dst, const void* src, size_t bytes) {
  RILL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx_.stream));
  return {};
}

Status CudaBackend::copy_device_to_device_batch(const std::vector<backend::DeviceCopy>& copies) {
  if (copies.empty()) return {};
  std::vector<void*> dst(copies.size());
  std::vector<const void*> src(copies.size());
  std::vector<size_t> bytes(copies.size());
  for (size_t i = 0; i < copies.size(); ++i) dst[i] = copies[i].dst, src[i] = copies[i].src, bytes[i] = copies[i].bytes;
  cudaMemcpyAttributes attr{};
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;  // the sources are written by earlier stream work
  size_t attr_index = 0;
  RILL_CUDA_CHECK(cudaMemcpyBatchAsync(dst.data(), src.data(), bytes.data(), copies.size(), &attr, &attr_index, 1,
                                       ctx_.stream));
  return {};
}

// Weight upload: a few worker threads, each with its own stream and two pinned buffers, take whole groups
// (shard files) so several shards stream at once: a worker copies a chunk of the mmap'd file into one pinned
// buffer (faulting the pages in) while its previous chunk travels to the GPU from the other.
Status CudaBackend::copy_to_device_batch(const std::vector<backend::CopyJob>& jobs,
                                         const std::function<void(size_t)>& progress) {
  constexpr int kWorkers = 4;
  constexpr size_t kChunk = size_t(32) << 20;
  RILL_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
  std::vector<Status> errors(kWorkers);
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      auto fail = [&](cudaError_t e, const char* what) {
        errors[size_t(w)] = internal_error("weight upload: {} failed: {}", what, cudaGetErrorString(e));
      };
      if (cudaError_t e = cudaSetDevice(ctx_.device); e != cudaSuccess) return fail(e, "cudaSetDevice");
      cudaStream_t stream = nullptr;
      void* pinned[2] = {nullptr, nullptr};
      cudaEvent_t done[2] = {nullptr, nullptr};
      cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      for (int b = 0; b < 2 && e == cudaSuccess; ++b) {
        e = cudaMallocHost(&pinned[b], kChunk);
        if (e == cudaSuccess) e = cudaEventCreateWithFlags(&done[b], cudaEventDisableTiming);
      }
      int next = 0;
      for (const backend::CopyJob& j : jobs) {
        if (e != cudaSuccess) break;
        if (j.group % kWorkers != w) continue;
        for (size_t off = 0; off < j.bytes && e == cudaSuccess; off += kChunk) {
          const size_t n = std::min(kChunk, j.bytes - off);
          e = cudaEventSynchronize(done[next]);  // the buffer's previous chunk has reached the GPU
          if (e != cudaSuccess) break;
          std::memcpy(pinned[next], static_cast<const char*>(j.src) + off, n);
          e = cudaMemcpyAsync(static_cast<char*>(j.dst) + off, pinned[next], n, cudaMemcpyHostToDevice,
                              stream);
          if (e == cudaSuccess) e = cudaEventRecord(done[next], stream);
          next ^= 1;
          if (progress) progress(n);
        }
      }
      if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
      if (e != cudaSuccess) fail(e, "copy");
      for (int b = 0; b < 2; ++b) {
        if (done[b]) cudaEventDestroy(done[b]);
        if (pinned[b]) cudaFreeHost(pinned[b]);
      }
      if (stream) cudaStreamDestroy(stream);
    });
  }
  for (auto& t : workers) t.join();
  for (const Status& s : errors) RILL_TRY(s);
  return {};
}

Status CudaBackend::fill_zero(TensorView t) {
  if (!t.is_contiguous()) return internal_error("fill_zero: view {} is not contiguous", t.describe());
  RILL_CUDA_CHECK(cudaMemsetAsync(t.data, 0, t.nbytes(), ctx_.stream));
  return {};
}

Status CudaBackend::fill_random(TensorView t, uint64_t seed, float lo, float hi) {
  return launch_fill_random(t, seed, lo, hi, ctx_);
}

Status CudaBackend::synchronize() {
  RILL_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
  return {};
}

Result<double> CudaBackend::time_ms(const std::function<Status()>& body) {
  cudaEvent_t start, stop;
  RILL_CUDA_CHECK(cudaEventCreate(&start));
  RILL_CUDA_CHECK(cudaEventCreate(&stop));
  RILL_CUDA_CHECK(cudaEventRecord(start, ctx_.stream));
  const Status st = body();
  RILL_CUDA_CHECK(cudaEventRecord(stop, ctx_.stream));
  RILL_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  RILL_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  RILL_TRY(st);
  return double(ms);
}

void CudaBackend::trace_push(const char* name) {
  nvtxRangePushA(name);
}
void CudaBackend::trace_pop() {
  nvtxRangePop();
}

// Copies host bytes into the pinned ring and enqueues the copy to `dst`. A half of the ring is reused only
// after the copies that read it have completed (its event), so the host never overwrites bytes in flight.
Status CudaBackend::stage(const void* host_src, size_t bytes, void* dst) {
  if (bytes == 0) return {};
  if (bytes > kHalf) {  // rare and large: a plain blocking copy
    RILL_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    RILL_CUDA_CHECK(cudaMemcpy(dst, host_src, bytes, cudaMemcpyHostToDevice));
    return {};
  }
  if (pinned_head_ + bytes > kHalf) {
    // Mark the end of this half's copies, then wait until the other half's last copies have read it.
    RILL_CUDA_CHECK(cudaEventRecord(pinned_free_[pinned_half_], ctx_.stream));
    pinned_half_ ^= 1;
    RILL_CUDA_CHECK(cudaEventSynchronize(pinned_free_[pinned_half_]));
    pinned_head_ = 0;
  }
  char* slot = static_cast<char*>(pinned_) + pinned_half_ * kHalf + pinned_head_;
  std::memcpy(slot, host_src, bytes);
  RILL_CUDA_CHECK(cudaMemcpyAsync(dst, slot, bytes, cudaMemcpyHostToDevice, ctx_.stream));
  pinned_head_ += align256(bytes);
  return {};
}

Status CudaBackend::upload_async(void* dst, const void* host_src, size_t bytes) {
  return stage(host_src, bytes, dst);
}

Status CudaBackend::upload_layout(const backend::BatchLayoutHost& host, int block_size,
                                  backend::BatchLayout* out) {
  backend::BatchLayout& l = *out;
  l = backend::layout_scalars(host, block_size);
  const std::vector<int32_t>* arrays[] = {&host.seq_token_start, &host.seq_start_pos, &host.seq_state_slot,
                                          &host.seq_kda_records, &host.block_tables,  &host.token_seq,
                                          &host.token_pos};
  const int32_t** fields[] = {&l.seq_token_start, &l.seq_start_pos, &l.seq_state_slot, &l.seq_kda_records,
                              &l.block_tables,    &l.token_seq,     &l.token_pos};
  // The snapshot requests travel only when the step asks for snapshots (their pointers stay null otherwise).
  const backend::KdaSnapshotsHost& snaps = host.kda_snapshots;
  const size_t snap_begin_bytes = snaps.seq_begin.size() * sizeof(int32_t),
               snap_bytes = snaps.requests.size() * sizeof(backend::KdaSnapshotRequest);
  size_t total = 0;
  for (const auto* a : arrays) total += align256(a->size() * sizeof(int32_t));
  if (!snaps.empty()) total += align256(snap_begin_bytes) + align256(snap_bytes);
  if (total > layout_cap_) {
    if (layout_dev_) {
      RILL_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));  // the old buffer may still be read
      RILL_CUDA_CHECK(cudaFree(layout_dev_));
    }
    layout_cap_ = std::max<size_t>(total * 2, 64 << 10);
    RILL_CUDA_CHECK(cudaMalloc(&layout_dev_, layout_cap_));
  }
  char* p = static_cast<char*>(layout_dev_);
  const auto place = [&](const void* src, size_t bytes) -> Status {
    RILL_TRY(stage(src, bytes, p));
    p += align256(bytes);
    return {};
  };
  for (size_t i = 0; i < std::size(arrays); ++i) {
    *fields[i] = reinterpret_cast<const int32_t*>(p);
    RILL_TRY(place(arrays[i]->data(), arrays[i]->size() * sizeof(int32_t)));
  }
  if (!snaps.empty()) {
    l.kda_snapshots.seq_begin = reinterpret_cast<const int32_t*>(p);
    RILL_TRY(place(snaps.seq_begin.data(), snap_begin_bytes));
    l.kda_snapshots.requests = reinterpret_cast<const backend::KdaSnapshotRequest*>(p);
    RILL_TRY(place(snaps.requests.data(), snap_bytes));
    l.kda_snapshots.n = int(snaps.requests.size());
  }
  return {};
}

Status CudaBackend::upload_layout_fixed(const backend::BatchLayoutHost& host, int block_size,
                                        int block_table_stride, void* dst, size_t bytes,
                                        backend::BatchLayout* out) {
  if (!host.kda_snapshots.empty())
    return internal_error("upload_layout_fixed: a step with KDA snapshots has no fixed layout");
  if (block_table_stride < host.max_blocks_per_seq)
    return internal_error("upload_layout_fixed: block table stride {} below the layout's {} blocks",
                          block_table_stride, host.max_blocks_per_seq);
  const size_t need = fixed_layout_bytes(host.n_seqs(), host.n_tokens(), block_table_stride);
  if (need > bytes) return internal_error("upload_layout_fixed: {} bytes needed, {} given", need, bytes);
  backend::BatchLayout& l = *out;
  l = backend::layout_scalars(host, block_size);
  l.max_blocks_per_seq = block_table_stride;
  const std::vector<int32_t>* arrays[] = {&host.seq_token_start, &host.seq_start_pos, &host.seq_state_slot,
                                          &host.seq_kda_records, &host.token_seq,     &host.token_pos};
  const int32_t** fields[] = {&l.seq_token_start, &l.seq_start_pos, &l.seq_state_slot, &l.seq_kda_records,
                              &l.token_seq,       &l.token_pos};
  char* p = static_cast<char*>(dst);
  for (size_t i = 0; i < std::size(arrays); ++i) {
    RILL_TRY(stage(arrays[i]->data(), arrays[i]->size() * 4, p));
    *fields[i] = reinterpret_cast<const int32_t*>(p);
    p += align256(arrays[i]->size() * 4);
  }
  // Block tables: each row's used entries, at the fixed stride (entries past a row's context are never read).
  const size_t width = size_t(host.max_blocks_per_seq) * 4, rows = size_t(host.n_seqs());
  l.block_tables = reinterpret_cast<const int32_t*>(p);
  if (width > 0 && rows > 0) {
    if (rows * width > kHalf)
      return internal_error("upload_layout_fixed: block tables of {} bytes", rows * width);
    // Through the pinned ring like every step upload, then one pitched copy.
    RILL_TRY(stage_pitched(host.block_tables.data(), width, rows, p, size_t(block_table_stride) * 4));
  }
  return {};
}

Status CudaBackend::stage_pitched(const void* host_src, size_t width, size_t rows, void* dst,
                                  size_t dst_pitch) {
  const size_t bytes = width * rows;
  if (pinned_head_ + bytes > kHalf) {
    RILL_CUDA_CHECK(cudaEventRecord(pinned_free_[pinned_half_], ctx_.stream));
    pinned_half_ ^= 1;
    RILL_CUDA_CHECK(cudaEventSynchronize(pinned_free_[pinned_half_]));
    pinned_head_ = 0;
  }
  char* slot = static_cast<char*>(pinned_) + pinned_half_ * kHalf + pinned_head_;
  std::memcpy(slot, host_src, bytes);
  RILL_CUDA_CHECK(
      cudaMemcpy2DAsync(dst, dst_pitch, slot, width, width, rows, cudaMemcpyHostToDevice, ctx_.stream));
  pinned_head_ += align256(bytes);
  return {};
}

namespace {

class CudaGraph final : public backend::CapturedWork {
 public:
  CudaGraph(cudaGraphExec_t exec, cudaStream_t stream) : exec_(exec), stream_(stream) {}
  ~CudaGraph() override { cudaGraphExecDestroy(exec_); }
  Status replay() override {
    RILL_CUDA_CHECK(cudaGraphLaunch(exec_, stream_));
    return {};
  }

 private:
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
};

}  // namespace

// Measured on the H100 (docs/PERF.md, 2026-12-06): decode at batch 64 (512 pairs) takes 26.7 ms eagerly with
// cuBLAS's grouped experts against 32.8 ms replayed from a graph with rill's mma.sync kernel; at batch 8 the
// graph wins. With the wgmma experts (moe_wgmma, which a graph can hold) the composed 48B still ran batch 64
// faster eagerly (25.17 ms, 26.05 from its graph: the graph's count-only attention plans) and batch 256 alike
// (42.87 / 42.68), so the limit stays.
int64_t CudaBackend::graph_max_expert_pairs(bool quantized_experts) const {
  if (quantized_experts || !ctx_.options.moe_cublas_grouped || ctx_.moe_grouped_gemm == nullptr) return INT64_MAX;
  return std::max(0, ctx_.options.moe_cublas_min_pairs - 1);
}

Result<std::unique_ptr<backend::CapturedWork>> CudaBackend::capture(const std::function<Status()>& body) {
  // Thread-local mode: a call on this thread that is unsafe during capture (a sync, a blocking copy) fails it
  // instead of silently running outside the graph.
  RILL_CUDA_CHECK(cudaStreamBeginCapture(ctx_.stream, cudaStreamCaptureModeThreadLocal));
  const Status st = body();
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(ctx_.stream, &graph);
  if (!st.ok()) {
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    return st;
  }
  if (end != cudaSuccess) {
    cudaGetLastError();
    return internal_error("graph capture failed: {}", cudaGetErrorString(end));
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (inst != cudaSuccess) {
    cudaGetLastError();
    return internal_error("graph instantiation failed: {}", cudaGetErrorString(inst));
  }
  return std::unique_ptr<backend::CapturedWork>(new CudaGraph(exec, ctx_.stream));
}

size_t CudaBackend::kda_attention_scratch_bytes(const backend::KdaAttentionArgs& a) const {
  return cuda::kda_attention_scratch_bytes(a);
}
size_t CudaBackend::mla_attention_scratch_bytes(const backend::MlaAttentionArgs& a) const {
  return cuda::mla_attention_scratch_bytes(a, ctx_);
}
// moe_fuse_shared off: Backend::moe_experts then strips the shared expert from the launcher's arguments and
// runs it as separate ops, so the launcher and its scratch query never see it.
bool CudaBackend::moe_fuses_shared_expert(const backend::MoeExpertsArgs& a) const {
  return ctx_.options.moe_fuse_shared && cuda::moe_fuses_shared_expert(a);
}

// Decode batches (decode_fusion): the add_rms_norm before a projection folds into its GEMV (gemm/gemv.cuh).
bool CudaBackend::gemm_group_fuses_norm(const backend::GemmGroupArgs& a) const {
  return ctx_.options.decode_fusion && gemv_group_fuses_norm(a);
}
bool CudaBackend::moe_route_fuses_norm(const backend::MoeRouteArgs& a) const {
  return cuda::moe_route_fuses_norm(a, ctx_);
}

size_t CudaBackend::moe_experts_scratch_bytes(const backend::MoeExpertsArgs& a) const {
  return cuda::moe_experts_scratch_bytes(a);
}
// FP8 weights above kFp8GemvMaxRows rows: the bf16 copy of the weight (gemm/fp8_dequant.h).
size_t CudaBackend::gemm_scratch_bytes(const backend::GemmArgs& a) const {
  if (!a.w || a.w->format != backend::WeightFormat::Fp8 || a.x.rank() != 2 || a.x.size(0) <= kFp8GemvMaxRows)
    return 0;
  const size_t dequant = fp8_dequant_bytes(*a.w);
  // Native: the staging, or the bf16 copy where cuBLASLt turns the shape down.
  if (ctx_.options.fp8_gemm_native && fp8_native_eligible(a))
    return std::max(dequant, fp8_native_stage(a.x.size(0), *a.w, nullptr).bytes);
  return dequant;
}
size_t CudaBackend::sample_scratch_bytes(const backend::SampleArgs& a) const {
  return cuda::sample_scratch_bytes(a);
}

Status CudaBackend::embed_impl(const backend::EmbedArgs& a) {
  return launch_embed(a, ctx_);
}
Status CudaBackend::rms_norm_impl(const backend::RmsNormArgs& a) {
  return launch_rms_norm(a, ctx_);
}
Status CudaBackend::add_rms_norm_impl(const backend::AddRmsNormArgs& a) {
  return launch_add_rms_norm(a, ctx_);
}
Status CudaBackend::gemm_impl(const backend::GemmArgs& a) {
  return gemm_->run(a, ctx_.stream);
}
// Decode-sized groups in one GEMV launch; anything else part by part (cuBLASLt or the GEMV).
Status CudaBackend::gemm_group_impl(const backend::GemmGroupArgs& a) {
  if (gemv_group_eligible(a) || a.norm) return launch_gemv_group(a, ctx_);  // a.norm: gemm_group_fuses_norm
  for (const backend::GemmArgs& p : a.parts) RILL_TRY(gemm_->run(p, ctx_.stream));
  return {};
}
Status CudaBackend::glu_impl(const backend::GluArgs& a) {
  return launch_glu(a, ctx_);
}
Status CudaBackend::add_impl(const backend::AddArgs& a) {
  return launch_add(a, ctx_);
}
Status CudaBackend::sigmoid_gate_impl(const backend::SigmoidGateArgs& a) {
  return launch_sigmoid_gate(a, ctx_);
}
Status CudaBackend::kda_prepare_impl(const backend::KdaPrepareArgs& a) {
  return launch_kda_prepare(a, ctx_);
}
Status CudaBackend::kda_attention_impl(const backend::KdaAttentionArgs& a) {
  return launch_kda_attention(a, ctx_);
}
Status CudaBackend::kda_fold_impl(const backend::KdaFoldArgs& a) {
  return launch_kda_fold(a, ctx_);
}
Status CudaBackend::kda_output_impl(const backend::KdaOutputArgs& a) {
  return launch_kda_output_norm(a, ctx_);
}
// One sequence takes the fused kernel only where its split form fits (a cluster of 4 CTAs a head, the heads
// on at most a quarter of the SMs): one CTA a head, 32 at batch 1, lost to the separate ops, which spread the
// f_b / g_b rows over every SM (kda/kda.h kda_decode_fusion_pays; cuda_backend_options.h kda_fused_decode).
bool CudaBackend::kda_fuses_decode(const backend::KdaDecodeArgs& a) const {
  return ctx_.options.kda_fused_decode && kda_decode_fusable(a) && a.layout != nullptr &&
         kda_decode_fusion_pays(a.layout->n_seqs, int(a.n_heads), ctx_);
}
Status CudaBackend::kda_decode_impl(const backend::KdaDecodeArgs& a) {
  return launch_kda_decode(a, ctx_);
}
Status CudaBackend::mla_cache_write_impl(const backend::MlaCacheWriteArgs& a) {
  return launch_mla_cache_write(a, ctx_);
}
Status CudaBackend::mla_attention_impl(const backend::MlaAttentionArgs& a) {
  return launch_mla_attention(a, ctx_);
}
Status CudaBackend::moe_route_impl(const backend::MoeRouteArgs& a) {
  return launch_moe_route(a, ctx_);
}
Status CudaBackend::moe_experts_impl(const backend::MoeExpertsArgs& a) {
  return launch_moe_experts(a, ctx_);
}
Status CudaBackend::gather_rows_impl(const backend::GatherRowsArgs& a) {
  return launch_gather_rows(a, ctx_);
}
Status CudaBackend::attn_res_mix_impl(const backend::AttnResMixArgs& a) {
  return launch_attn_res_mix(a, ctx_);
}
Status CudaBackend::sample_impl(const backend::SampleArgs& a) {
  return launch_sample(a, ctx_);
}
Status CudaBackend::apply_penalties_impl(const backend::PenaltyArgs& a) {
  return launch_apply_penalties(a, ctx_);
}
Status CudaBackend::mask_logits_impl(const backend::TokenMaskArgs& a) {
  return launch_mask_logits(a, ctx_);
}
Status CudaBackend::nonfinite_rows_impl(const backend::NonfiniteRowsArgs& a) {
  return launch_nonfinite_rows(a, ctx_);
}
Status CudaBackend::logprobs_impl(const backend::LogprobsArgs& a) {
  return launch_logprobs(a, ctx_);
}
Status CudaBackend::quantize_fp8_impl(const backend::QuantizeFp8Args& a) {
  return launch_quantize_fp8(a, ctx_.stream);
}

}  // namespace rill::cuda

namespace rill::backend {

Result<std::unique_ptr<Backend>> make_cuda_backend(int device, const CudaBackendOptions& options) {
  RILL_ASSIGN_OR_RETURN(auto b, cuda::CudaBackend::create(device, options));
  return std::unique_ptr<Backend>(std::move(b));
}

}  // namespace rill::backend
