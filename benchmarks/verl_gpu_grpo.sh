#!/usr/bin/env bash
# A real verl GRPO run (python -m verl.trainer.main_ppo, vLLM rollout, FSDP actor) with rl_guards on one GPU, for the
# day a device is lent. Prepared on a CPU machine; NOT RUN YET (no device was lent to issue 37's session).
#
# Run from the repository root on a CUDA machine whose Python has verl 0.9.x, vLLM and Ray (nothing is installed
# here: verl + vLLM do not fit the device run's 64 MiB of carried files). Results on stdout and, when $OUT is set,
# under $OUT (logs, the runs' rl_guards/ folders):
#   0. what is installed (verl, vllm, ray, torch, the GPU); exit 2 when verl or vllm is missing;
#   1. baseline: verl's own naive manager and sampler, STEPS steps; verl's console log gives timing_s/step;
#   2. guarded, V1 trainer: the same run with GuardedRewardManager + GuardedReplayBuffer + GuardedCheckpointCallback;
#      its rl_guards/... metrics in verl's console log, findings and dumps under $OUT/guarded/rl_guards/;
#   3. raise mode: a scorer that raises on a malformed reference row and reward_errors.mode=raise: the run must stop
#      at step 1 with the guard's message (exit code != 0, "raised on" in the log);
#   4. guarded, legacy trainer (trainer.use_v1=false, GuardedAgentLoopManager), STEPS steps.
# The per-step cost of the guards on GPU: compare timing_s/step of 1 and 2 (same machine, same seed, printed at the end).
# MODEL=/path/to/a/local/causal-lm (default: the tiny fixture with the full Qwen vocabulary, built offline here).
set -u
OUT=${OUT:-/tmp/verl_gpu}
STEPS=${STEPS:-4}
mkdir -p "$OUT"
export PYTHONPATH=$PWD:${PYTHONPATH:-} TOKENIZERS_PARALLELISM=false WANDB_MODE=disabled RAY_USAGE_STATS_ENABLED=0
log=$OUT/verl_gpu_grpo.log
{
if ls .whl/*.whl >/dev/null 2>&1; then  # rl_guards' own small dependencies, carried as wheels (device_check.sh)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PYTHONPATH
fi
python3 - <<'EOF' || { echo "verl or vllm missing: nothing run"; exit 2; }
import importlib
for name in ("verl", "vllm", "ray", "torch", "transformers"):
    module = importlib.import_module(name)
    print(name, getattr(module, "__version__", "?"))
import torch
print("gpu", torch.cuda.get_device_name(0))
EOF
python3 - "$OUT" <<'EOF'
# the data (verl's parquet layout) and, unless MODEL is set, the tiny model with the full Qwen vocabulary
import os, sys
from rl_guards.testing.verl_run import verl_rows, verl_row, write_parquet
out = sys.argv[1]
write_parquet(f"{out}/data/train.parquet", verl_rows(n_per_task=64))
write_parquet(f"{out}/data/planted.parquet",
              verl_rows(n_per_task=8) + [verl_row("What is 2+2? Answer with the number.", "plant/parse", "n/a", 999)])
if not os.environ.get("MODEL"):
    from rl_guards.testing import tiny_setup
    print("model", tiny_setup(vocab_size=None, cache_dir=f"{out}/cache").model_dir)
EOF
MODEL=${MODEL:-$(ls -d "$OUT"/cache/tiny-* | head -1)}
SCORER=$PWD/rl_guards/testing/verl_run.py
PLANTED=$PWD/tests/verl/planted_scorer.py

base=(
  algorithm.adv_estimator=grpo algorithm.use_kl_in_reward=false
  data.train_files="$OUT/data/train.parquet" data.val_files="$OUT/data/train.parquet"
  data.train_batch_size=16 data.max_prompt_length=128 data.max_response_length=128
  actor_rollout_ref.model.path="$MODEL" actor_rollout_ref.actor.optim.lr=1e-6
  actor_rollout_ref.actor.ppo_mini_batch_size=16 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16
  actor_rollout_ref.actor.use_kl_loss=false actor_rollout_ref.actor.entropy_coeff=0
  actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.n=4 actor_rollout_ref.rollout.tensor_model_parallel_size=1
  actor_rollout_ref.rollout.gpu_memory_utilization=0.3 actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16
  reward.custom_reward_function.path="$SCORER" reward.custom_reward_function.name=tiny_compute_score
  trainer.n_gpus_per_node=1 trainer.nnodes=1 trainer.logger='[console]' trainer.val_before_train=false
  trainer.test_freq=-1 trainer.total_training_steps="$STEPS" trainer.save_freq=2 trainer.project_name=rl_guards
)
guarded=(
  reward.reward_manager.source=importlib reward.reward_manager.name=GuardedRewardManager
  reward.reward_manager.module.path=pkg://rl_guards.verl +reward.rl_guards.inner=naive
  trainer.v1.sampler.custom_sampler.path=pkg://rl_guards.verl trainer.v1.sampler.custom_sampler.name=GuardedReplayBuffer
  trainer.checkpoint_callback_class=rl_guards.verl.GuardedCheckpointCallback
)
run() {  # run NAME SECONDS OVERRIDES...: main_ppo, its log in $OUT/NAME.log; prints the exit code
  local name=$1 limit=$2; shift 2
  timeout "$limit" python3 -m verl.trainer.main_ppo "$@" trainer.experiment_name="$name" \
    trainer.default_local_dir="$OUT/$name" >"$OUT/$name.log" 2>&1
  echo "## $name: exit $?"
}
steps() { grep -o "timing_s/step:[0-9.]*" "$OUT/$1.log" | tr '\n' ' '; echo; }

echo "## 1. baseline (verl's naive manager and sampler)"
run baseline 1200 "${base[@]}"; steps baseline
echo "## 2. guarded, V1 trainer"
run guarded 1200 "${base[@]}" "${guarded[@]}"; steps guarded
grep -o "rl_guards[_a-z]*/[^ ]*:[-0-9.e]*" "$OUT/guarded.log" | sort | uniq | head -40
ls -R "$OUT/guarded/rl_guards" | head -20
python3 -m rl_guards.cli.main rollouts "$OUT/guarded" list
echo "## 3. raise mode: a raising scorer row, reward_errors.mode=raise (must stop at step 1)"
run raise 900 "${base[@]}" "${guarded[@]}" data.train_files="$OUT/data/planted.parquet" \
  reward.custom_reward_function.path="$PLANTED" reward.custom_reward_function.name=compute_score \
  +reward.rl_guards.reward_errors.mode=raise
grep -m3 "raised on\|RewardFunctionError" "$OUT/raise.log"
echo "## 4. guarded, legacy trainer"
run legacy 1200 "${base[@]}" reward.reward_manager.source=importlib reward.reward_manager.name=GuardedRewardManager \
  reward.reward_manager.module.path=pkg://rl_guards.verl trainer.use_v1=false \
  +actor_rollout_ref.rollout.agent.agent_loop_manager_class=rl_guards.verl.GuardedAgentLoopManager
steps legacy
grep -m5 "rl_guards step" "$OUT/legacy.log"
} 2>&1 | tee "$log"
