#!/usr/bin/env bash
# One training run over every host of a Cloud TPU pod slice (e.g. v4-32 = 4 hosts x 4 chips).
#
#   TPU_NAME=my-pod ZONE=us-central2-b bash launch/tpu_pod.sh WORKDIR --config=configs/fedgc/fedgc.py \
#       [--config.<field>=value ...]
#
# e.g.
#   TPU_NAME=my-pod ZONE=us-central2-b bash launch/tpu_pod.sh gs://my-bucket/fedgc_webface \
#       --config=configs/fedgc/fedgc.py:loss=cosface --config.data.source=insightface \
#       --config.data.root=/mnt/data/faces_webface_112x112 --config.data.image_size=112 \
#       --config.model.name=iresnet34
#
# Every host runs the same command (gcloud ... ssh --worker=all) with FEDJAX_FACE_DISTRIBUTED=on:
# jax.distributed.initialize() finds the hosts itself on TPU VMs. The clients axis of a round is
# split over every chip of the slice and each host samples and decodes only its own clients'
# images (so data.root must hold the data on every host: a copy or a shared mount). Only process
# 0 (worker 0) writes WORKDIR: checkpoints, TensorBoard, results.json, report.md; rerunning the
# same command resumes from worker 0's checkpoints. WORKDIR is best a bucket (gs://bucket/run: it
# outlives the slice); a local path is on worker 0's disk.
#
# Environment:
#   TPU_NAME, ZONE  required: the TPU VM slice and its zone
#   PROJECT         optional: gcloud project
#   REPO_DIR        the checkout of this repository on every host (default: ~/fedjax_face)
#   PYTHON          the interpreter on the hosts (default: python3)
#   SETUP           shell commands run first on every host, e.g.
#                   "git -C ~/fedjax_face pull && pip install -r ~/fedjax_face/requirements.txt"
#   DRY_RUN=1       print the gcloud command instead of running it
set -euo pipefail
if [[ $# -lt 2 || -z "${TPU_NAME:-}" || -z "${ZONE:-}" ]]; then
  grep '^#\( \|$\)' "$0" >&2
  echo "error: need TPU_NAME and ZONE in the environment, then WORKDIR and --config=..." >&2
  exit 2
fi
workdir=$1; shift
repo=${REPO_DIR:-'~/fedjax_face'}
python=${PYTHON:-python3}
args=$(printf '%q ' "--workdir=${workdir}" "$@")
run="FEDJAX_FACE_DISTRIBUTED=on ${python} -m fedjax_face.main ${args}"
remote="cd ${repo} && ${SETUP:+${SETUP} && }${run}"
cmd=(gcloud compute tpus tpu-vm ssh "${TPU_NAME}" "--zone=${ZONE}" --worker=all
     "--command=${remote}")
[[ -n "${PROJECT:-}" ]] && cmd+=("--project=${PROJECT}")
if [[ -n "${DRY_RUN:-}" ]]; then
  printf '%q ' "${cmd[@]}"; echo
else
  "${cmd[@]}"
fi
