#!/usr/bin/env bash
# Device runs without a device-side build. The CPU machine has the CUDA toolkit, so the GPU programs build here
# (Release, sm_90a, MPI off: the GPU machine has no MPI), stripped and xz-packed into .prebuilt/ (~6 MB,
# git-ignored, apart from .deps/ which gpu_check.sh carries whole) with the runtime Debian packages the GPU
# machine lacks and the Kimi tokenizer (for `rill serve`); on the GPU machine `run` unpacks the programs into
# /tmp/rill-bin and runs a command with $B pointing there. A device call then spends its minutes measuring:
# gpu_check.sh's build of rill and backend_tests there takes several of them, this unpack a few seconds.
#
#   here:   tools/fetch_gpu_deps.sh; tools/gpu_prebuilt.sh pack [TARGET...]   (default: rill backend_tests)
#   device: tools/gpu_prebuilt.sh run 'COMMAND'   with carry [".prebuilt"], e.g.
#           run '$B/rill bench --load-format dummy --preset kimi-linear-48b --quantization fp8 --skip-ops'
#           run 'tools/spec_workload/run.sh $B --device cuda --repeats 3'
#
# The test programs compile in this checkout's path (tests/test_paths.h): tests that read the checkout's files
# (fixtures, tokenizers) find them only through gpu_check.sh's device-side build; op tests that make their
# inputs (backend_tests' KdaCuda*, *Fp8Experts*, ...) run from here. Separate from gpu_check.sh, whose
# sections rely on a build tree there (ctest, the kernel labs).
set -euo pipefail
cd "$(dirname "$0")/.."
RUN=.prebuilt
case ${1:-} in
  pack)
    shift
    targets=("$@")
    [[ ${#targets[@]} -eq 0 ]] && targets=(rill backend_tests)
    BUILD=${PREBUILT_BUILD:-build-prebuilt}
    mkdir -p "$BUILD"
    cmake -S . -B "$BUILD" -G Ninja -DRILL_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON \
      -DRILL_WERROR=OFF -DCMAKE_CUDA_FLAGS=-lineinfo > "$BUILD/configure.log"  # (-lineinfo: for ncu)
    ninja -C "$BUILD" "${targets[@]}"
    rm -rf $RUN && mkdir -p $RUN/prebuilt
    for t in "${targets[@]}"; do
      exe=$(find "$BUILD" -type f -name "$t" -perm -u+x | head -1)
      [[ -n $exe ]] || { echo "gpu_prebuilt.sh: no program $t in $BUILD" >&2; exit 1; }
      strip -o "$RUN/prebuilt/$t" "$exe" && xz -T2 -6 "$RUN/prebuilt/$t"
    done
    # The shared libraries the programs load that the GPU image lacks (tools/fetch_gpu_deps.sh fetched them).
    for p in libspdlog1.10 libfmt9 libedit2 libbsd0 libmd0 libpcre2-8-0 libbenchmark1debian; do
      cp .deps/${p}_*.deb $RUN/
    done
    [[ -f .deps/kimi.tar.gz ]] && cp .deps/kimi.tar.gz $RUN/
    git rev-parse --short HEAD > $RUN/commit.txt
    git diff --quiet HEAD || echo "(with uncommitted changes)" >> $RUN/commit.txt
    du -sh $RUN
    ;;
  run)
    if ! [[ -d $RUN/prebuilt ]]; then
      echo "gpu_prebuilt.sh: no $RUN/prebuilt: pack it on the CPU machine, carry [\".prebuilt\"]" >&2
      exit 1
    fi
    DEPS=/tmp/rill-deps B=/tmp/rill-bin
    mkdir -p $DEPS $B ${OUT:-/tmp/rill-gpu-out}
    for f in $RUN/*.deb; do dpkg-deb -x "$f" $DEPS; done
    for f in $RUN/prebuilt/*.xz; do  # (python's lzma: the GPU image need not have xz)
      python3 -c "import lzma, sys; open(sys.argv[2], 'wb').write(lzma.open(sys.argv[1]).read())" "$f" \
        "$B/$(basename "$f" .xz)"
      chmod +x "$B/$(basename "$f" .xz)"
    done
    export B LD_LIBRARY_PATH=$DEPS/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # never NVLink multicast
    echo "prebuilt from $(tr '\n' ' ' < $RUN/commit.txt);" \
      "$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader)"
    bash -c "${2:?gpu_prebuilt.sh run needs a command}"
    ;;
  *)
    sed -n '2,17p' "$0" >&2
    exit 2
    ;;
esac
