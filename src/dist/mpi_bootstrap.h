// MPI bootstrap: the launch across processes (mpirun, or srun --mpi=pmix under Slurm; spec/parallelism.md
// §5). rank/size come from MPI_COMM_WORLD; the local rank (which GPU a process's rank uses) from Open MPI's
// OMPI_COMM_WORLD_LOCAL_RANK / Slurm's SLURM_LOCALID; broadcast_bytes carries NCCL's unique id from rank 0.
// Optional: built when CMake finds MPI (Debian libopenmpi-dev); otherwise mpi_init answers Unimplemented.
//
// A dead process ends the whole MPI job (mpirun kills the others), which is how a failed rank is reported
// across processes: MPI itself has no timeouts.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace rill::dist {

struct MpiWorld {
  int rank = 0;
  int size = 1;
  int local_rank = 0;  // among the processes of this node
};

// Whether this build has MPI.
bool mpi_built();
// Whether mpirun / srun started this process (Open MPI's, PMIx's or PMI's variables are set), so that it
// should join the job with mpi_init: a plain start needs no MPI at all (Open MPI's singleton init would
// start a daemon).
bool mpi_launched();
// MPI_Init_thread (MPI_THREAD_MULTIPLE: a rank's threads may call it) once per process; a process not started
// by mpirun is a world of one.
Result<MpiWorld> mpi_init();
// MPI_Finalize, once, at exit of the process that called mpi_init.
void mpi_finalize();
// Root's bytes (any length) to every process of MPI_COMM_WORLD.
Status mpi_broadcast_bytes(std::vector<uint8_t>& bytes, int root);
// An MPI call's return code as a Status naming the call (MPI builds only: `err` is the call's int result).
Status mpi_status(const char* call, int err);

}  // namespace rill::dist
