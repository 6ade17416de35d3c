#!/usr/bin/env bash
#SBATCH --job-name=fedjax_face
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8        # one process per GPU: keep equal to --gpus-per-node
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=8          # image decoding threads (data.decode_threads=0 uses them all)
#SBATCH --time=24:00:00
#SBATCH --output=%x-%j.out
#
# One training run over every GPU of a SLURM allocation, one process per GPU.
#
#   sbatch launch/slurm_gpu.sh WORKDIR --config=configs/fedgc/fedgc.py [--config.<field>=value ...]
#   sbatch --nodes=4 launch/slurm_gpu.sh /shared/runs/fedgc_webface \
#       --config=configs/fedgc/fedgc.py:loss=cosface --config.data.source=insightface \
#       --config.data.root=/shared/data/faces_webface_112x112 --config.data.image_size=112 \
#       --config.model.name=iresnet34
#
# sbatch options on the command line override the header (nodes, GPUs per node: change
# --ntasks-per-node with --gpus-per-node). srun starts one process per task; the coordinator is
# the allocation's first node (from SLURM_JOB_NODELIST) on a port derived from the job id (set
# COORDINATOR_PORT to choose one); JAX reads the process count and id from SLURM_NTASKS /
# SLURM_PROCID and gives each process the GPU SLURM_LOCALID. Each process samples and decodes
# only its own clients' images; only process 0 writes WORKDIR (checkpoints, TensorBoard,
# results.json, report.md), and resubmitting the same command resumes. Run from the repository
# root (sbatch keeps the working directory); PYTHON picks the interpreter (default: python).
set -euo pipefail
if [[ $# -lt 2 || -z "${SLURM_JOB_ID:-}" ]]; then
  grep '^#\( \|$\)' "$0" >&2
  echo "error: submit with sbatch, with WORKDIR and --config=..." >&2
  exit 2
fi
workdir=$1; shift
head_node=$(scontrol show hostnames "${SLURM_JOB_NODELIST}" | head -n 1)
port=${COORDINATOR_PORT:-$((20000 + SLURM_JOB_ID % 20000))}
export JAX_COORDINATOR_ADDRESS="${head_node}:${port}"
export FEDJAX_FACE_DISTRIBUTED=on
echo "coordinator ${JAX_COORDINATOR_ADDRESS}: ${SLURM_NTASKS} processes," \
     "${SLURM_JOB_NUM_NODES} node(s)"
srun --kill-on-bad-exit=1 "${PYTHON:-python}" -m fedjax_face.main --workdir="${workdir}" "$@"
