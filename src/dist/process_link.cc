#include "dist/process_link.h"

#include <array>
#include <chrono>
#include <thread>

#if RILL_HAVE_MPI
#include <mpi.h>

#include "dist/mpi_bootstrap.h"
#endif

namespace rill::dist {

namespace {
// Indexed by LinkTag less LinkTag::Options (the tags start at 1), in its order.
constexpr std::array<const char*, 5> kLinkTagNames = {"options", "report", "verdict", "step", "shutdown"};
static_assert(kLinkTagNames.size() == size_t(LinkTag::Shutdown) - size_t(LinkTag::Options) + 1,
              "a name for every LinkTag");
}  // namespace

const char* link_tag_name(LinkTag tag) {
  const size_t i = size_t(tag) - size_t(LinkTag::Options);  // wraps past the end for tags below Options
  return i < kLinkTagNames.size() ? kLinkTagNames[i] : "?";
}

Status ProcessLink::send_to_workers(LinkTag tag, std::span<const uint8_t> bytes) {
  for (int p = 1; p < n_processes_; ++p) RILL_TRY(send(p, tag, bytes));
  return {};
}

void ProcessLink::release_workers() {
  if (!is_leader() || released_) return;
  released_ = true;
  (void)send_to_workers(LinkTag::Shutdown, {});  // a failed send: the job is ending anyway
}

#if RILL_HAVE_MPI

namespace {

class MpiProcessLink final : public ProcessLink {
 public:
  MpiProcessLink(MPI_Comm comm, int process, int n) : ProcessLink(process, n), comm_(comm) {}
  ~MpiProcessLink() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  Status send(int to, LinkTag tag, std::span<const uint8_t> bytes) override {
    if (bytes.size() > size_t(INT32_MAX))
      return invalid_argument("process link: a {} message of {} bytes (MPI counts stop at 2^31-1)",
                              link_tag_name(tag), bytes.size());
    return mpi_status("MPI_Send (process link)",
                      MPI_Send(bytes.data(), int(bytes.size()), MPI_BYTE, to, int(tag), comm_));
  }

  Result<LinkMessage> receive(int from) override {
    using Clock = std::chrono::steady_clock;
    const auto spin_until = Clock::now() + std::chrono::milliseconds(20);
    auto nap = std::chrono::microseconds(50);
    MPI_Status st;
    for (;;) {
      int ready = 0;
      RILL_TRY(mpi_status("MPI_Iprobe (process link)", MPI_Iprobe(from, MPI_ANY_TAG, comm_, &ready, &st)));
      if (ready) break;
      if (Clock::now() < spin_until) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(nap);
        nap = std::min(nap * 2, std::chrono::microseconds(1000));
      }
    }
    int n = 0;
    MPI_Get_count(&st, MPI_BYTE, &n);
    if (st.MPI_TAG < int(LinkTag::Options) || st.MPI_TAG > int(LinkTag::Shutdown))
      return internal_error("process link: process {} sent a message with tag {}", from, st.MPI_TAG);
    LinkMessage m;
    m.tag = LinkTag(st.MPI_TAG);
    m.bytes.resize(size_t(n));
    RILL_TRY(mpi_status("MPI_Recv (process link)",
                        MPI_Recv(m.bytes.data(), n, MPI_BYTE, from, st.MPI_TAG, comm_, MPI_STATUS_IGNORE)));
    return m;
  }

  [[noreturn]] void abort_job(int exit_code) override {
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);  // MPI_Abort does not return; if it did, this process still must not go on
  }

 private:
  MPI_Comm comm_;
};

}  // namespace

Result<std::unique_ptr<ProcessLink>> ProcessLink::make(const MpiWorld& world) {
  MPI_Comm comm = MPI_COMM_NULL;
  RILL_TRY(mpi_status("MPI_Comm_dup (process link)", MPI_Comm_dup(MPI_COMM_WORLD, &comm)));
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  return std::unique_ptr<ProcessLink>(new MpiProcessLink(comm, world.rank, world.size));
}

#else

Result<std::unique_ptr<ProcessLink>> ProcessLink::make(const MpiWorld&) {
  return unimplemented(
      "this rill was built without MPI (install libopenmpi-dev, scripts/setup.sh, and re-run "
      "cmake)");
}

#endif

}  // namespace rill::dist
