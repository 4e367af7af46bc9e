# Sourced by a device call's script, from the repository root on the device machine: unpacks the carried Debian
# packages (.deps/debs) and prebuilt binaries (.gpubin/gpubin.tar.xz, from pack_gpu_binaries.sh), links the source
# path the tests were built in to this tree (they find their fixtures there), and sets B (the binaries), O (the
# output folder, /tmp/o) and LD_LIBRARY_PATH. NCCL_NVLS_ENABLE=0 as on every device call.
export NCCL_NVLS_ENABLE=0
R=$PWD/.deps/root
mkdir -p "$R" && for f in .deps/debs/*.deb; do dpkg -x "$f" "$R"; done
rm -rf /tmp/gpubin && tar xJf .gpubin/gpubin.tar.xz -C /tmp
src=$(cat /tmp/gpubin/source_dir)
mkdir -p "$(dirname "$src")" && { [ -e "$src" ] || ln -s "$PWD" "$src"; }
export LD_LIBRARY_PATH=$R/usr/lib/x86_64-linux-gnu:/tmp/gpubin
B=/tmp/gpubin
O=/tmp/o
mkdir -p "$O"
