#!/bin/bash
# One GPU call: llama.cpp (llama-cpp-python 0.3.36's vendor/llama.cpp, CUDA, sm_90a; build.sh)
# against plumb, on synthetic GGUF files made there by plumb synth. Beside this script: plumb
# (a stripped release build) and llama*.tar.xz. Everything goes to $OUT/log.txt as well.
C=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
set -x
P=$C/plumb
LIMIT=${LIMIT:-165}   # seconds after which the optional runs are skipped
PP=${PP:-512} TG=${TG:-128} DEPTH=${DEPTH:-4096} BPP=${BPP:-128} NPL=${NPL:-1,4,16,64}
mkdir -p /tmp/llama && for a in "$C"/llama*.tar.xz; do tar xJf "$a" -C /tmp/llama; done
L=/tmp/llama
SP=$(python3 -c 'import site;print(site.getsitepackages()[0])')
NVL=$(find "$SP/nvidia" \( -name 'libcublas.so*' -o -name 'libnvrtc.so*' -o -name 'libcudart.so*' \) -printf '%h\n' | sort -u | tr '\n' ':')
export LD_LIBRARY_PATH=$L:$NVL
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
ls -la $L
ldd $L/llama-bench $L/libggml-cuda.so | grep -E 'not found|cublas|cudart|libcuda'
export PLUMB_KERNELS=/tmp/k
M=/tmp/m; mkdir -p $M
# The four files, made at once (the 7B Q4_K_M one is the long one).
$P synth --shape llama2-7b --type q4_k_m -o $M/7b-q4_k_m.gguf & pids="$!"
$P synth --shape llama2-7b --type q4_0 -o $M/7b-q4_0.gguf & pids="$pids $!"
$P synth --shape llama2-7b --type q8_0 -o $M/7b-q8_0.gguf & pids="$pids $!"
$P synth --shape tinyllama-1.1b --type q4_k_m -o $M/tinyllama-q4_k_m.gguf & pids="$pids $!"
wait $pids  # by id: a plain wait would also wait for the tee above
ls -la $M
echo "synth done at ${SECONDS}s"

# The first llama.cpp run is verbose: its log names the CUDA device and the offloaded layers.
$L/llama-bench -m $M/tinyllama-q4_k_m.gguf -ngl 99 -fa 1 -p $PP -n $TG -r 3 -o md -v > $OUT/llama-verbose.txt 2>&1
grep -E 'ggml_cuda_init|Device 0|offload|CUDA0|using device|model buffer size|KV buffer' $OUT/llama-verbose.txt | head -30
grep -E '^\|' $OUT/llama-verbose.txt

pair() { # FILE [extra args for both]
  local f=$1; shift
  echo "=== llama.cpp $f $* (${SECONDS}s)"
  $L/llama-bench -m $M/$f.gguf -ngl 99 -fa 1 -p $PP -n $TG -r 3 -o md "$@"
  echo "=== plumb $f $* (${SECONDS}s)"
  $P bench -m $M/$f.gguf --backend cuda -p $PP -n $TG -r 3 "$@"
}
pair tinyllama-q4_k_m
pair 7b-q4_k_m
pair 7b-q4_0
pair 7b-q8_0
echo "core runs done at ${SECONDS}s"
if [ $SECONDS -lt $LIMIT ]; then
  echo "=== llama-batched-bench 7b-q4_k_m (${SECONDS}s)"
  $L/llama-batched-bench -m $M/7b-q4_k_m.gguf -ngl 99 -fa 1 -c 33000 -b 2048 -ub 512 -npp $BPP -ntg $BPP -npl $NPL 2>&1 | grep -E '^\||ggml_cuda_init|Device 0|error'
  echo "=== plumb bench --parallel 7b-q4_k_m (${SECONDS}s)"
  $P bench -m $M/7b-q4_k_m.gguf --backend cuda -p $BPP -n $BPP -r 1 --parallel $NPL
fi
for f in 7b-q4_k_m tinyllama-q4_k_m; do
  if [ $SECONDS -lt $LIMIT ]; then pair $f -d $DEPTH; fi
done
echo "all done at ${SECONDS}s"
