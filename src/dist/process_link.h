// ProcessLink: how the leader process (MPI rank 0: the server, the scheduler, rank 0 of the world) talks to
// the worker processes of an mpirun job (issue #17; spec/parallelism.md §5–§6): host messages of any length,
// each with a tag saying what it is. It is a communicator of its own (a duplicate of MPI_COMM_WORLD), so its
// messages never match the ranks' collectives. No MPI types here.
//
// Waiting: a worker waits for the next step for as long as the server is idle, and Open MPI's blocking calls
// spin on a core while they wait. receive() polls instead: it spins briefly (a busy server's next step comes
// within milliseconds), then sleeps between polls up to a millisecond, so an idle job costs no CPU.
//
// Failures: MPI has no timeouts, and a rank stuck in a collective cannot be freed from another process. A
// process whose rank fails therefore logs the reason naming the rank and ends the whole job (abort_job,
// MPI_Abort); a process that dies is reported by mpirun, which ends the job too.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "dist/mpi_bootstrap.h"

namespace rill::dist {

// A new tag goes last, with its name at the end of process_link.cc's kLinkTagNames (and recv's range check).
enum class LinkTag : int {
  Options = 1,  // leader -> workers: the runner options to set up with
  Report,       // worker -> leader: a process's setup outcome
  Verdict,      // leader -> workers: go on (with a block count) or stop
  Step,         // leader -> workers: one step to run
  Shutdown,     // leader -> workers: leave the step loop and exit
};
const char* link_tag_name(LinkTag tag);

struct LinkMessage {
  LinkTag tag = LinkTag::Shutdown;
  std::vector<uint8_t> bytes;
};

class ProcessLink {
 public:
  virtual ~ProcessLink() = default;
  // Collective over MPI_COMM_WORLD (every process calls it once, after mpi_init).
  static Result<std::unique_ptr<ProcessLink>> make(const MpiWorld& world);

  int process() const { return process_; }
  int n_processes() const { return n_processes_; }
  bool is_leader() const { return process_ == 0; }

  virtual Status send(int to, LinkTag tag, std::span<const uint8_t> bytes) = 0;
  // The next message from `from`, in the order it sent them; waits (polling) until one comes.
  virtual Result<LinkMessage> receive(int from) = 0;
  // Leader: the same message to every worker process.
  Status send_to_workers(LinkTag tag, std::span<const uint8_t> bytes);
  // Leader: Shutdown to every worker, once (later calls do nothing): when the server stops, or when it fails
  // before its executor was made and the workers still wait for their options.
  void release_workers();
  // Ends every process of the job at once (MPI_Abort), after the caller has logged why; never returns.
  [[noreturn]] virtual void abort_job(int exit_code) = 0;

 protected:
  ProcessLink(int process, int n_processes) : process_(process), n_processes_(n_processes) {}

 private:
  int process_;
  int n_processes_;
  bool released_ = false;
};

}  // namespace rill::dist
