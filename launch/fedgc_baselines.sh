#!/usr/bin/env bash
# Centralized / FedPE / FedGC with the default config (FedGC Table 5, Softmax rows) on the embedded
# benchmark, then one comparison table.
#
#   bash launch/fedgc_baselines.sh [OUTDIR] [extra --config.* overrides...]
#
# About 3 minutes per run on 2 CPU cores. Pass e.g. "loss=cosface" via LOSS=cosface.
set -euo pipefail
out=${1:-/tmp/fedgc_baselines}; shift || true
loss=${LOSS:-softmax}
for method in centralized fedpe fedgc; do
  python -m fedjax_face.main --config="configs/fedgc/${method}.py:loss=${loss}" \
    --workdir="${out}/${method}_${loss}" "$@"
done
python -m fedjax_face.tools.compare --out="${out}/table_${loss}.md" \
  "${out}/centralized_${loss}" "${out}/fedpe_${loss}" "${out}/fedgc_${loss}"
