#include "dist/mpi_bootstrap.h"

#include <cstdlib>

#if RILL_HAVE_MPI
#include <mpi.h>
#endif

namespace rill::dist {

bool mpi_launched() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') return true;
  return false;
}

#if RILL_HAVE_MPI

Status mpi_status(const char* call, int err) {
  if (err == MPI_SUCCESS) return {};
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(err, text, &len);
  return unavailable("{} failed: {}", call, std::string(text, len));
}

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

}  // namespace

bool mpi_built() {
  return true;
}

Result<MpiWorld> mpi_init() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    RILL_TRY(
        mpi_status("MPI_Init_thread", MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided)));
    if (provided < MPI_THREAD_MULTIPLE) {
      return unavailable("MPI gives thread level {}, rill's ranks need MPI_THREAD_MULTIPLE ({})", provided,
                         int(MPI_THREAD_MULTIPLE));
    }
    // Errors come back as codes (and Statuses) instead of aborting the job from inside a call.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  }
  MpiWorld w;
  RILL_TRY(mpi_status("MPI_Comm_rank", MPI_Comm_rank(MPI_COMM_WORLD, &w.rank)));
  RILL_TRY(mpi_status("MPI_Comm_size", MPI_Comm_size(MPI_COMM_WORLD, &w.size)));
  w.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", env_int("SLURM_LOCALID", 0));
  return w;
}

void mpi_finalize() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Finalize();
}

Status mpi_broadcast_bytes(std::vector<uint8_t>& bytes, int root) {
  uint64_t n = bytes.size();
  RILL_TRY(mpi_status("MPI_Bcast (length)", MPI_Bcast(&n, 1, MPI_UINT64_T, root, MPI_COMM_WORLD)));
  bytes.resize(n);
  if (n > uint64_t(INT32_MAX)) return invalid_argument("mpi_broadcast_bytes: {} bytes, at most 2^31-1", n);
  return mpi_status("MPI_Bcast", MPI_Bcast(bytes.data(), int(n), MPI_BYTE, root, MPI_COMM_WORLD));
}

#else

bool mpi_built() {
  return false;
}
Result<MpiWorld> mpi_init() {
  return unimplemented(
      "this rill was built without MPI (install libopenmpi-dev, scripts/setup.sh, and re-run cmake)");
}
void mpi_finalize() {}
Status mpi_broadcast_bytes(std::vector<uint8_t>&, int) {
  return unimplemented("this rill was built without MPI");
}

#endif

}  // namespace rill::dist
