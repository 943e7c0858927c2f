# Helpers for a session's build_libs.sh (bench/results/sessionN/), which fills the git-ignored
# folder a device call carries: libraries of one ABI built from variants of the tree, main's
# bench programs and demo, and the shared libraries the device image lacks (the layout
# bench/device_call.sh reads). Sourced, never run, from the repository root:
#   source bench/device_libs.sh OUT BUILD_DIR
# configures BUILD_DIR (CUDA, sm_90a, Release) and builds everything once, copies the
# programs and system libraries into OUT, and gives
#   device_lib NAME     the current tree's library as OUT/NAME.so.3.xz
# Refuses to start when kernels/ has uncommitted changes (the variants are made by checking
# files out over it; the caller restores them).
DL_OUT=$1
DL_BUILD=$2
[ -z "$(git status --porcelain -- kernels)" ] || { echo "kernels/ has changes: commit or stash them first"; exit 1; }
export PATH=/usr/local/cuda/bin:$PATH
cmake -S . -B "$DL_BUILD" -G Ninja -DBSPA_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DBSPA_CUDA_ARCHS=90a >/dev/null
mkdir -p "$DL_OUT/bin/bench" "$DL_OUT/sys"
ninja -C "$DL_BUILD" >/dev/null  # the library, the bench programs, the demo
cp "$DL_BUILD"/bench/{bench_decode,bench_gpu_check,bench_fp8_check,bench_step,bench_prefill} "$DL_OUT/bin/bench/"
cp "$DL_BUILD/examples/demo/bspa-demo" "$DL_OUT/bin/"
cp -L /lib/x86_64-linux-gnu/{libsimdjson.so.14,libxxhash.so.0,libgomp.so.1} "$DL_OUT/sys/"

device_lib() {
  ninja -C "$DL_BUILD" bspa >/dev/null
  xz -T0 -6 -c "$DL_BUILD/libbspa.so.3" > "$DL_OUT/$1.so.3.xz"
  echo "built $DL_OUT/$1.so.3.xz"
}
