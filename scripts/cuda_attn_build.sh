#!/bin/bash
# Builds test_cuda_attention for sm_90a on the development machine without the rest of flashseek_cuda (the
# shared 2-core box cannot afford the whole library for a kernel iteration), and stages it with libfmt in
# .attn_dev/ for scripts/cuda_attn_device.sh. Needs build-attn/ configured (cmake -S . -B build-attn) for the
# util and loader libraries. The CMake target test_cuda_attention builds the same sources for every arch.
set -e
cd "$(dirname "$0")/.."
O=/tmp/attn_obj
mkdir -p $O .attn_dev
NVCC="nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a -lineinfo -Isrc --expt-relaxed-constexpr"
CXX="g++ -std=c++20 -O2 -Isrc -Itests/cuda/attention -I/usr/local/cuda/include"
for f in src/cuda/rope/rope.cu src/cuda/norm/rmsnorm.cu src/cuda/mhc/mhc.cu src/cuda/attention/kv_store.cu \
         src/cuda/attention/sparse_attention.cu src/cuda/compressor/compressor.cu src/cuda/indexer/indexer.cu; do
  $NVCC -c $f -o $O/$(basename $f).o &
done
for f in tests/cuda/attention/*.cpp src/cuda/attention/attn_error.cpp src/cuda/rope/rope_table.cpp; do
  $CXX -c $f -o $O/t_$(basename $f).o &
done
for f in src/cpu/ops.cpp src/cpu/ops_quant.cpp src/cpu/ops_linear.cpp src/cpu/thread_pool.cpp; do
  $CXX -ffp-contract=off -c $f -o $O/cpu_$(basename $f).o &
done
wait
g++ -o .attn_dev/test_cuda_attention $O/t_*.o $O/[a-z]*.cu.o $O/cpu_*.o build-attn/src/loader/libflashseek_loader.a \
    build-attn/src/util/libflashseek_util.a -L/usr/local/cuda/lib64 -lcudart_static -lgtest_main -lgtest -lfmt \
    -lpthread -ldl -lrt
cp -L /lib/x86_64-linux-gnu/libfmt.so.9 .attn_dev/
echo "built .attn_dev/test_cuda_attention"
