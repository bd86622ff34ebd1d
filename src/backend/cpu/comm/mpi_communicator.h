// MpiCommunicator: the CPU backend's communicator across processes (mpirun), so multi-process launch is
// testable without GPUs. Built when CMake finds MPI (dist/mpi_bootstrap.h); no MPI types here.
//
// Sums gather every rank's input and add them in rank order in fp32, rounded once — the thread communicator's
// rule, so both give the same bytes (MPI_Allreduce's order is the library's, and MPI has no bf16). Moves are
// MPI byte collectives. A dead process ends the job (mpirun), MPI has no timeouts of its own.
#pragma once

#include <memory>

#include "dist/communicator.h"

namespace rill::backend {

// The communicator of the processes of MPI_COMM_WORLD that pass the same colour, ranked by key (a Mapping's
// group_index and rank_in; colour 0 and key = rank for the world). Every process calls it at once
// (MPI_Comm_split). mpi_init() first.
Result<std::unique_ptr<dist::Communicator>> make_mpi_communicator(int color, int key);

}  // namespace rill::backend
