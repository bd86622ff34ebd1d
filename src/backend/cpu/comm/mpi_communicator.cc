#include "backend/cpu/comm/mpi_communicator.h"

#include <mpi.h>

#include <cstring>
#include <numeric>

#include <fmt/format.h>

#include "dist/mpi_bootstrap.h"

namespace rill::backend {

namespace {

#define RILL_MPI_TRY(call) RILL_TRY(dist::mpi_status(#call, (call)))

Result<int> int_count(const char* op, size_t n) {
  if (n > size_t(INT32_MAX)) return invalid_argument("{}: {} bytes, MPI counts stop at 2^31-1", op, n);
  return int(n);
}

float load(const uint8_t* p, DType t, int64_t i) {
  return t == DType::F32 ? reinterpret_cast<const float*>(p)[i]
                         : bf16_to_f32(reinterpret_cast<const uint16_t*>(p)[i]);
}

void store(void* p, DType t, int64_t i, float v) {
  if (t == DType::F32) {
    static_cast<float*>(p)[i] = v;
  } else {
    static_cast<uint16_t*>(p)[i] = f32_to_bf16(v);
  }
}

class MpiCommunicator final : public dist::Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, int rank, int size) : Communicator(rank, size, Device::Cpu), comm_(comm) {}
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  std::string describe() const override {
    return fmt::format("MPI communicator, rank {} of {}", rank(), size());
  }

 protected:
  Status all_reduce_sum_impl(const TensorView& in, const TensorView& out) override {
    std::vector<uint8_t> all;
    RILL_TRY(gather_all("all_reduce_sum", in, all));
    sum(all, in.dtype, in.numel(), 0, in.numel(), out.data);
    return {};
  }

  Status reduce_scatter_impl(const TensorView& in, const TensorView& out) override {
    std::vector<uint8_t> all;
    RILL_TRY(gather_all("reduce_scatter", in, all));
    sum(all, in.dtype, in.numel(), int64_t(rank()) * out.numel(), out.numel(), out.data);
    return {};
  }

  Status all_gather_impl(const TensorView& in, const TensorView& out) override {
    RILL_ASSIGN_OR_RETURN(const int n, int_count("all_gather", in.nbytes()));
    // A copy of in: it may be this rank's slice of out (MPI_IN_PLACE would need it at exactly that offset).
    std::vector<uint8_t> mine(static_cast<const uint8_t*>(in.data), static_cast<const uint8_t*>(in.data) + n);
    RILL_MPI_TRY(MPI_Allgather(mine.data(), n, MPI_BYTE, out.data, n, MPI_BYTE, comm_));
    return {};
  }

  Status all_to_all_v_impl(const TensorView& in, std::span<const int64_t> send_rows, const TensorView& out,
                           std::span<const int64_t> recv_rows) override {
    const size_t row = dist::row_bytes(in);
    std::vector<int> sc(size()), sd(size()), rc(size()), rd(size());
    size_t so = 0, ro = 0;
    for (int j = 0; j < size(); ++j) {
      RILL_ASSIGN_OR_RETURN(sc[j], int_count("all_to_all_v", send_rows[j] * row));
      RILL_ASSIGN_OR_RETURN(rc[j], int_count("all_to_all_v", recv_rows[j] * row));
      RILL_ASSIGN_OR_RETURN(sd[j], int_count("all_to_all_v", so));
      RILL_ASSIGN_OR_RETURN(rd[j], int_count("all_to_all_v", ro));
      so += sc[j];
      ro += rc[j];
    }
    // The counts are checked against the senders' first: a mismatch in MPI_Alltoallv is undefined.
    std::vector<int> theirs(size());
    RILL_MPI_TRY(MPI_Alltoall(sc.data(), 1, MPI_INT, theirs.data(), 1, MPI_INT, comm_));
    for (int j = 0; j < size(); ++j) {
      if (theirs[j] != rc[j]) {
        return invalid_argument("all_to_all_v: rank {} sends {} rows to rank {}, which expects {}", j,
                                theirs[j] / int64_t(row), rank(), recv_rows[j]);
      }
    }
    RILL_MPI_TRY(MPI_Alltoallv(in.data, sc.data(), sd.data(), MPI_BYTE, out.data, rc.data(), rd.data(),
                               MPI_BYTE, comm_));
    return {};
  }

  Status send_impl(const TensorView& in, int peer) override {
    RILL_ASSIGN_OR_RETURN(const int n, int_count("send", in.nbytes()));
    RILL_MPI_TRY(MPI_Send(in.data, n, MPI_BYTE, peer, 0, comm_));
    return {};
  }

  Status recv_impl(const TensorView& out, int peer) override {
    RILL_ASSIGN_OR_RETURN(const int n, int_count("recv", out.nbytes()));
    MPI_Status st;
    RILL_MPI_TRY(MPI_Recv(out.data, n, MPI_BYTE, peer, 0, comm_, &st));
    int got = 0;
    MPI_Get_count(&st, MPI_BYTE, &got);
    if (got != n)
      return invalid_argument("recv: rank {} sent {} bytes, out {} holds {}", peer, got, out.describe(), n);
    return {};
  }

  Status broadcast_impl(const TensorView& data, int root) override {
    RILL_ASSIGN_OR_RETURN(const int n, int_count("broadcast", data.nbytes()));
    RILL_MPI_TRY(MPI_Bcast(data.data, n, MPI_BYTE, root, comm_));
    return {};
  }

  Status broadcast_bytes_impl(std::vector<uint8_t>& bytes, int root) override {
    uint64_t n = bytes.size();
    RILL_MPI_TRY(MPI_Bcast(&n, 1, MPI_UINT64_T, root, comm_));
    RILL_ASSIGN_OR_RETURN(const int count, int_count("broadcast_bytes", n));
    bytes.resize(n);
    RILL_MPI_TRY(MPI_Bcast(bytes.data(), count, MPI_BYTE, root, comm_));
    return {};
  }

  Status barrier_impl() override {
    RILL_MPI_TRY(MPI_Barrier(comm_));
    return {};
  }

 private:
  // Every rank's `in` (the same size everywhere, checked), rank 0's first.
  Status gather_all(const char* op, const TensorView& in, std::vector<uint8_t>& all) {
    uint64_t mine = in.nbytes();
    std::vector<uint64_t> sizes(size());
    RILL_MPI_TRY(MPI_Allgather(&mine, 1, MPI_UINT64_T, sizes.data(), 1, MPI_UINT64_T, comm_));
    for (int r = 0; r < size(); ++r) {
      if (sizes[r] != mine) {
        return invalid_argument("{}: rank {} brings {} bytes, rank {} {}", op, r, sizes[r], rank(), mine);
      }
    }
    RILL_ASSIGN_OR_RETURN(const int n, int_count(op, in.nbytes()));
    all.resize(size_t(n) * size());
    RILL_MPI_TRY(MPI_Allgather(in.data, n, MPI_BYTE, all.data(), n, MPI_BYTE, comm_));
    return {};
  }

  // dst[i] = sum over ranks r in order of rank r's element begin + i (fp32, rounded once).
  void sum(const std::vector<uint8_t>& all, DType t, int64_t per_rank, int64_t begin, int64_t n,
           void* dst) const {
    const size_t stride = size_t(per_rank) * dtype_size(t);
    for (int64_t i = 0; i < n; ++i) {
      float acc = load(all.data(), t, begin + i);  // not 0 + x: that would turn -0 into +0
      for (int r = 1; r < size(); ++r) acc += load(all.data() + r * stride, t, begin + i);
      store(dst, t, i, acc);
    }
  }

  MPI_Comm comm_;
};

}  // namespace

Result<std::unique_ptr<dist::Communicator>> make_mpi_communicator(int color, int key) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return invalid_argument("make_mpi_communicator: call dist::mpi_init() first");
  MPI_Comm comm = MPI_COMM_NULL;
  RILL_MPI_TRY(MPI_Comm_split(MPI_COMM_WORLD, color < 0 ? MPI_UNDEFINED : color, key, &comm));
  if (comm == MPI_COMM_NULL) return invalid_argument("make_mpi_communicator: no colour, no communicator");
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  return std::unique_ptr<dist::Communicator>(new MpiCommunicator(comm, rank, size));
}

}  // namespace rill::backend
