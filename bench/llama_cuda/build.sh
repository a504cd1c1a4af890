#!/bin/bash
# Cross-builds llama.cpp's CUDA backend (llama-bench, llama-batched-bench and their shared
# libraries, sm_90a only) from llama-cpp-python 0.3.36's sdist (vendor/llama.cpp at 0c1e570),
# with CUDA 13.0 from PyPI wheels, on a machine without a GPU or a CUDA install. About 65
# minutes on 2 cores. The result is $OUT_TAR (default ./llama.tar.xz), stripped, for
# gpu.sh beside it (see README.md here).
set -euo pipefail
W=${W:-/tmp/llama-cuda}
OUT_TAR=$(realpath -m "${OUT_TAR:-llama.tar.xz}")
mkdir -p "$W" && cd "$W"
python3 -m venv venv && . venv/bin/activate
pip install cmake ninja scikit-build-core
pip download --no-binary :all: --no-deps --no-build-isolation llama-cpp-python==0.3.36
tar xzf llama_cpp_python-0.3.36.tar.gz
pip install --target "$W/cuda" nvidia-cuda-nvcc==13.0.88 nvidia-cuda-runtime==13.0.96 \
  nvidia-cuda-cccl==13.0.85 nvidia-cublas==13.0.2.14 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88
T=$W/cuda/nvidia/cu13
ln -sfn lib $T/lib64                                  # nvcc.profile looks in lib64
(cd $T/lib && ln -sf libcudart.so.13 libcudart.so && ln -sf libcublas.so.13 libcublas.so && ln -sf libcublasLt.so.13 libcublasLt.so)
# No libcuda stub ships in these wheels: one with every CUresult function of cuda.h, empty.
mkdir -p $T/lib/stubs stub
gcc -E -P -I $T/include $T/include/cuda.h | tr '\n' ' ' | sed 's/;/;\n/g' \
  | grep -oP '^\s*(extern\s+)?CUresult\s+\K\w+(?=\s*\()' | sort -u | awk '{print "void "$1"(void){}"}' > stub/libcuda_stub.c
gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o $T/lib/stubs/libcuda.so stub/libcuda_stub.c
export PATH=$T/bin:$PATH
# AMX off: the build machines report AMX tiles that their OS does not enable.
nice -n 19 cmake -S llama_cpp_python-0.3.36/vendor/llama.cpp -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
 -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DGGML_NATIVE=OFF -DGGML_CUDA_FA_ALL_QUANTS=OFF -DGGML_CUDA_NCCL=OFF \
 -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
 -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON \
 -DBUILD_SHARED_LIBS=ON -DCUDAToolkit_ROOT=$T -DCMAKE_CUDA_COMPILER=$T/bin/nvcc \
 -DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath-link,$T/lib"
nice -n 19 ninja -C build -j2 llama-bench llama-batched-bench
rm -rf stage && mkdir stage && cp -a build/bin/* stage/ && (cd stage && for f in $(find . -type f); do strip $f; done)
tar -C stage -cf - . | xz -T2 -9 > "$OUT_TAR"
echo "wrote $OUT_TAR"
