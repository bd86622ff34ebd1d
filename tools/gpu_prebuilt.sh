#!/usr/bin/env bash
# Device runs without a device-side build. The CPU machine has the CUDA toolkit, so the GPU programs build here
# (Release, sm_90a, MPI off: the GPU machine has no MPI), stripped and xz-packed into .prebuilt/ (~6 MB,
# git-ignored, apart from .deps/ which gpu_check.sh carries whole) with the runtime Debian packages the GPU
# machine lacks and the Kimi tokenizer (for `rill serve`); on the GPU machine `run` unpacks the programs into
# /tmp/rill-bin and runs a command with $B pointing there. A device call then spends its minutes measuring:
# gpu_check.sh's build of rill and backend_tests there takes several of them, this unpack a few seconds.
#
#   here:   tools/fetch_gpu_deps.sh; tools/gpu_prebuilt.sh pack [TARGET...]   (default: rill backend_tests)
#           tools/gpu_prebuilt.sh baseline REV [TARGET...]   (after pack; default: rill) adds REV's build of each
#           TARGET as $B/<target>_base, for an A/B of two trees in one call (built in a worktree under
#           build-base/; ~4 MB a program: a device call carries at most 64 MiB with the tracked files)
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

# Configures source tree $1 into build folder $2 as the GPU machine's programs are built.
configure() {
  mkdir -p "$2"
  cmake -S "$1" -B "$2" -G Ninja -DRILL_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON \
    -DRILL_WERROR=OFF -DCMAKE_CUDA_FLAGS=-lineinfo > "$2/configure.log"  # (-lineinfo: for ncu)
}

# A device call carries the tracked and untracked-not-ignored files plus the carried paths, at most 64 MiB
# (counted in disk blocks): says so here, before a call is refused for it.
check_size() {
  local tracked packed
  tracked=$(git ls-files -z --cached --others --exclude-standard | xargs -0 du -ck 2>/dev/null | tail -1 | cut -f1)
  packed=$(du -sk $RUN | cut -f1)
  if ((tracked + packed > 65536)); then
    echo "gpu_prebuilt.sh: the checkout (${tracked} KiB) and $RUN (${packed} KiB) exceed a device call's 64 MiB;" \
      "pack fewer programs (or remove $RUN/kimi.tar.gz where no serve run needs it)" >&2
  fi
}

case ${1:-} in
  pack)
    shift
    targets=("$@")
    [[ ${#targets[@]} -eq 0 ]] && targets=(rill backend_tests)
    BUILD=${PREBUILT_BUILD:-build-prebuilt}
    configure . "$BUILD"
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
    check_size
    ;;
  baseline)
    rev=$(git rev-parse --verify "${2:?gpu_prebuilt.sh baseline needs a revision}^{commit}")
    shift 2
    targets=("$@")
    [[ ${#targets[@]} -eq 0 ]] && targets=(rill)
    [[ -d $RUN/prebuilt ]] || { echo "gpu_prebuilt.sh: pack first (pack empties $RUN)" >&2; exit 1; }
    TREE=build-base/tree BUILD=build-base/build
    if [[ -e $TREE/.git ]]; then
      git -C "$TREE" checkout -q --detach "$rev"
    else
      git worktree add -q --detach "$TREE" "$rev"
    fi
    configure "$TREE" "$BUILD"
    ninja -C "$BUILD" "${targets[@]}"
    for t in "${targets[@]}"; do
      exe=$(find "$BUILD" -type f -name "$t" -perm -u+x | head -1)
      [[ -n $exe ]] || { echo "gpu_prebuilt.sh: no program $t in $BUILD" >&2; exit 1; }
      rm -f "$RUN/prebuilt/${t}_base.xz"
      strip -o "$RUN/prebuilt/${t}_base" "$exe" && xz -T2 -6 "$RUN/prebuilt/${t}_base"
    done
    echo "baseline $(git rev-parse --short "$rev")" >> $RUN/commit.txt
    du -sh $RUN
    check_size
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
