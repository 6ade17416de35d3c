#!/usr/bin/env bash
# The accelerator checks, in one process per part so that a part cut off by the time limit loses
# only its own figures: the platform, the full bench section by section (the rounds cohort by
# cohort), then the engine's equality tests.
#
#   bash launch/device_check.sh OUT_DIR [SECONDS]
#
# Every part gets at most what is left of SECONDS (default 540). BENCH_CONFIG overrides the bench
# config (configs/bench.py:full; configs/bench.py:runlocal tries the script on a CPU in seconds).
# PARTS names the parts to run, in order (the list at the end; default all).
# OUT_DIR receives log.txt (every part's output) and bench_<part>.json, flat, with no folders.
# The project's packages missing from a machine's image (on the lent NVIDIA machines:
# ml-collections and tensorboardX; flax, optax and orbax-checkpoint at other versions) go on
# PYTHONPATH first, e.g. `pip install --no-deps --target /tmp/site WHEELS` (BUILD_NOTES.md, "On
# an NVIDIA H200").
set -u
out=${1:?usage: device_check.sh OUT_DIR [SECONDS]}
deadline=$((SECONDS + ${2:-540}))
config=${BENCH_CONFIG:-configs/bench.py:full}
mkdir -p "$out"
log=$out/log.txt
export PYTHONUNBUFFERED=1
# Two processes never share the accelerator here, but a test's subprocess would find it taken.
export XLA_PYTHON_CLIENT_PREALLOCATE=false

left() { echo $((deadline - SECONDS)); }

# $1: a name; $2: at most this many seconds; the rest: the command.
part() {
  local name=$1 limit=$2
  shift 2
  local budget
  budget=$(left)
  ((budget > limit)) && budget=$limit
  if ((budget < 15)); then
    echo "== $name: not run ($(left) s left)" | tee -a "$log"
    return
  fi
  echo "== $name (at most $budget s)" | tee -a "$log"
  local t0=$SECONDS
  timeout "$budget" "$@" >>"$log" 2>&1
  echo "== $name: exit $? after $((SECONDS - t0)) s" | tee -a "$log"
}

# $1: a part name; $2: at most this many seconds; the rest: --config overrides.
bench() {
  local name=$1 limit=$2
  shift 2
  part "bench $name" "$limit" python3 -m fedjax_face.tools.bench --config="$config" \
    --out="/tmp/device_check_$name" "$@"
  [[ -f /tmp/device_check_$name/bench.json ]] && cp "/tmp/device_check_$name/bench.json" \
    "$out/bench_$name.json"
}

{
  date -u
  echo "commit ${COMMIT:-unknown}"
  nvidia-smi -L 2>&1 || true
  python3 -c 'import sys, jax, jaxlib, flax, optax, orbax.checkpoint as ocp, numpy
print(sys.version.split()[0], "jax", jax.__version__, "jaxlib", jaxlib.__version__, "flax",
      flax.__version__, "optax", optax.__version__, "numpy", numpy.__version__)
print(jax.devices())'
} >>"$log" 2>&1

cohort() { echo "--config.bench.sections=('rounds',)" "--config.bench.run_cohorts=('$1',)"; }
sections() { echo "--config.bench.sections=($1)"; }

# The parts, by name; PARTS picks some and their order (default: all, in this order).
run_part() {
  # shellcheck disable=SC2046  (the overrides are words without spaces)
  case $1 in
    rounds_fedgc) bench rounds_fedgc 150 $(cohort fedgc) ;;
    rounds_fedfv) bench rounds_fedfv 120 $(cohort fedfv) ;;
    rounds_large) bench rounds_large 150 $(cohort large) ;;
    fedavg_cnn) bench fedavg_cnn 90 $(sections "'fedavg_cnn',") ;;
    regularizer) bench regularizer 90 $(sections "'regularizer',") ;;
    eval_and_fedfv) bench eval_and_fedfv 90 $(sections "'eval','one_per_client'") ;;
    ijb) bench ijb 90 $(sections "'ijb',") ;;
    backbone_training) bench backbone_training 120 $(sections "'backbone_training',") ;;
    partial_fc) bench partial_fc 120 $(sections "'partial_fc',") ;;
    # IResNet-50 images/s in float32 / bfloat16 / float16 beside PyTorch AMP where torch sees CUDA
    # (issue 62), at arcface_torch's batch per GPU; prints its table into the log.
    precision) part "precision" 150 python3 -m fedjax_face.tools.bench.precision \
      --batch_size=128 --repeats=5 ;;
    engine_tests) part "engine tests" 200 python3 -m pytest -q -p no:cacheprovider \
      tests/core/test_engine.py ;;
    *) echo "== $1: no such part" | tee -a "$log" ;;
  esac
}
for name in ${PARTS:-rounds_fedgc rounds_fedfv rounds_large fedavg_cnn regularizer eval_and_fedfv ijb backbone_training partial_fc precision engine_tests}; do
  run_part "$name"
done
echo "== done, $(left) s of the limit left" | tee -a "$log"
