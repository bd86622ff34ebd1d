#include "dist/communicator.h"

#include <numeric>

namespace rill::dist {

int64_t row_elements(const TensorView& t) {
  int64_t n = 1;
  for (int d = 1; d < t.rank(); ++d) n *= t.size(d);
  return n;
}

size_t row_bytes(const TensorView& t) {
  return size_t(row_elements(t)) * dtype_size(t.dtype);
}

Status Communicator::check_tensor(const char* op, const char* name, const TensorView& t) const {
  if (t.rank() == 0) return invalid_argument("{}: {} has no shape", op, name);
  if (t.numel() > 0 && t.data == nullptr)
    return invalid_argument("{}: {} {} has no data", op, name, t.describe());
  if (!t.is_contiguous()) return invalid_argument("{}: {} {} is not contiguous", op, name, t.describe());
  if (t.device != device_) {
    return invalid_argument("{}: {} is on {}, the communicator on {}", op, name, device_name(t.device),
                            device_name(device_));
  }
  return {};
}

Status Communicator::check_peer(const char* op, const char* name, int peer) const {
  if (peer < 0 || peer >= size_)
    return out_of_range("{}: {} {} is outside the group of {}", op, name, peer, size_);
  return {};
}

static Status check_sum_dtype(const char* op, const TensorView& t) {
  if (t.dtype != DType::F32 && t.dtype != DType::BF16) {
    return invalid_argument("{}: sums take F32 or BF16, got {}", op, dtype_name(t.dtype));
  }
  return {};
}

Status Communicator::all_reduce_sum(const TensorView& in, const TensorView& out) {
  RILL_TRY(check_tensor("all_reduce_sum", "in", in));
  RILL_TRY(check_tensor("all_reduce_sum", "out", out));
  RILL_TRY(check_sum_dtype("all_reduce_sum", in));
  if (in.dtype != out.dtype || !(in.shape == out.shape)) {
    return invalid_argument("all_reduce_sum: out {} differs from in {}", out.describe(), in.describe());
  }
  return all_reduce_sum_impl(in, out);
}

Status Communicator::all_gather(const TensorView& in, const TensorView& out) {
  RILL_TRY(check_tensor("all_gather", "in", in));
  RILL_TRY(check_tensor("all_gather", "out", out));
  if (in.dtype != out.dtype || row_elements(in) != row_elements(out) || out.size(0) != in.size(0) * size_) {
    return invalid_argument("all_gather: out {} must be {} x in {} along dimension 0", out.describe(), size_,
                            in.describe());
  }
  return all_gather_impl(in, out);
}

Status Communicator::reduce_scatter(const TensorView& in, const TensorView& out) {
  RILL_TRY(check_tensor("reduce_scatter", "in", in));
  RILL_TRY(check_tensor("reduce_scatter", "out", out));
  RILL_TRY(check_sum_dtype("reduce_scatter", in));
  if (in.dtype != out.dtype || row_elements(in) != row_elements(out) || in.size(0) != out.size(0) * size_) {
    return invalid_argument("reduce_scatter: in {} must be {} x out {} along dimension 0", in.describe(),
                            size_, out.describe());
  }
  return reduce_scatter_impl(in, out);
}

Status Communicator::all_to_all_v(const TensorView& in, std::span<const int64_t> send_rows,
                                  const TensorView& out, std::span<const int64_t> recv_rows) {
  RILL_TRY(check_tensor("all_to_all_v", "in", in));
  RILL_TRY(check_tensor("all_to_all_v", "out", out));
  if (in.dtype != out.dtype || row_elements(in) != row_elements(out)) {
    return invalid_argument("all_to_all_v: in {} and out {} differ in dtype or row width", in.describe(),
                            out.describe());
  }
  if (int(send_rows.size()) != size_ || int(recv_rows.size()) != size_) {
    return invalid_argument("all_to_all_v: {} send_rows and {} recv_rows for a group of {}", send_rows.size(),
                            recv_rows.size(), size_);
  }
  for (int j = 0; j < size_; ++j) {
    if (send_rows[j] < 0 || recv_rows[j] < 0) {
      return invalid_argument("all_to_all_v: negative row count for rank {}", j);
    }
  }
  const int64_t sent = std::accumulate(send_rows.begin(), send_rows.end(), int64_t(0));
  const int64_t received = std::accumulate(recv_rows.begin(), recv_rows.end(), int64_t(0));
  if (sent > in.size(0)) {
    return invalid_argument("all_to_all_v: send_rows add up to {}, in {} has {} rows", sent, in.describe(),
                            in.size(0));
  }
  if (received > out.size(0)) {
    return invalid_argument("all_to_all_v: recv_rows add up to {}, out {} has {} rows", received,
                            out.describe(), out.size(0));
  }
  return all_to_all_v_impl(in, send_rows, out, recv_rows);
}

Status Communicator::send(const TensorView& in, int peer) {
  RILL_TRY(check_tensor("send", "in", in));
  RILL_TRY(check_peer("send", "peer", peer));
  if (peer == rank_) return invalid_argument("send: rank {} sends to itself", rank_);
  return send_impl(in, peer);
}

Status Communicator::recv(const TensorView& out, int peer) {
  RILL_TRY(check_tensor("recv", "out", out));
  RILL_TRY(check_peer("recv", "peer", peer));
  if (peer == rank_) return invalid_argument("recv: rank {} receives from itself", rank_);
  return recv_impl(out, peer);
}

Status Communicator::broadcast(const TensorView& data, int root) {
  RILL_TRY(check_tensor("broadcast", "data", data));
  RILL_TRY(check_peer("broadcast", "root", root));
  return broadcast_impl(data, root);
}

Status Communicator::broadcast_bytes(std::vector<uint8_t>& bytes, int root) {
  RILL_TRY(check_peer("broadcast_bytes", "root", root));
  return broadcast_bytes_impl(bytes, root);
}

Status Communicator::barrier() {
  return barrier_impl();
}

}  // namespace rill::dist
