#!/usr/bin/env bash
# Every table of every paper standing on one commit, as queues that resume (issue 38). Run from a
# worktree of the commit the tables are to stand on (the runs are that worktree's code: `python -m`
# imports the package of the current directory), one process per core if you like; the script
# itself may be a later checkout's, with a longer queue:
#
#   git worktree add /tmp/final <commit> && cd /tmp/final
#   bash /work/main/launch/every_table.sh spot /tmp/spot /work/main/results          # first
#   bash /work/main/launch/every_table.sh full /work/main/results/sweep /tmp/archive [LANE LANES]
#
# The sweep of issue 38 stood on 23bfe48, its root in results/sweep (sessions 27-32). Every paper
# landed by session 32 and the root was removed: its runs are in results/<paper>_tables.
# spot: for each table that rebuilds from the archive (`reproduce --check`), one run per method at
#   seed 0, compared cell by cell with the archived run (`reproduce --spot_check`). A table whose
#   spot check gives the same digits stands on the archive; add one that differs to FULL below.
#   The digits depend on the machine kind too (BUILD_NOTES, "The run archive"): on another kind
#   than the archive's, every table differs, and only the archived run's own commit rerun on the
#   same machine tells code from machine.
# full: the tables that must be run again: never archived, stale, or with the five seeds of a
#   headline ordering. Each table runs what ROOT lacks and reads what is there (a run with
#   results.json or failed.json is not started again), writes ROOT/docs/<paper>_table<N>.md and
#   copies its runs' kept files to ARCHIVE/<paper>_tables (tools/tables/archive.py:ARCHIVED).
#   With LANE and LANES (0 2 and 1 2 in two shells) the lanes first share out the runs of the
#   whole queue run by run (launch/share_runs.py), then each makes every LANES-th table.
# park: at the end of a sitting whose machine keeps nothing but commits, with the lanes stopped,
#   shrink ROOT's ended runs of the FULL tables to their archived files and remove the unfinished
#   ones (`reproduce --park`); keep ROOT inside a checkout (e.g. results/sweep) and commit it.
#   The next sitting makes the same worktree and runs `full` with that ROOT: it goes on. Commit a
#   table's archived runs only with its docs (`reproduce --check` holds the two together), or
#   give `full` a scratch ARCHIVE until the last sitting.
# status: how many runs each FULL table still lacks under ROOT (trains nothing), and per paper
#   the hours those runs took in the archive.
# drain: each lane ends after the run it is training (then park); `full` clears it when it starts.
# land ROOT PAPER: from the checkout, once every FULL table of PAPER has its runs under ROOT: the
#   paper's archive results/PAPER_tables replaced whole by those runs, its docs made from the
#   archive (their footnotes name it), its pages' verdicts copied (tools.claims); then it lists
#   the means the pages' prose quotes that the new tables no longer hold. Update those and the
#   prose around them, run `reproduce --check`, and commit it all at once.
# Stop either at any time: the same command goes on where it stopped. Afterwards copy ROOT/docs
# to the checkout's docs/, then `python -m fedjax_face.tools.claims` and
# `python -m fedjax_face.reproduce --check`.
set -euo pipefail
usage='usage: every_table.sh spot|full ROOT ARCHIVE [LANE LANES], park|status ROOT, land ROOT PAPER or drain'
mode=${1:?$usage}
drain=/tmp/every_table_claims/drain   # launch/share_runs.py:DRAIN
if [[ $mode == drain ]]; then
  mkdir -p "$(dirname "$drain")" && touch "$drain"
  echo "each lane ends after its current run; then: every_table.sh park ROOT"
  exit 0
fi
root=${2:?$usage}
[[ $mode == park || $mode == status || $mode == land ]] || archive=${3:?$usage}
lane=${4:-0}
lanes=${5:-1}

# Empty since session 27: on its machine kind every spot check differed (fedfr2, fedfr_fig3, pad5,
# pad6, pad7, pad_fedma and privacy1's FedGC runs), and most of those tables' runs have no
# recorded commit to rerun beside the final one, so they moved to FULL (the last nine there).
SPOT=()
# "table seeds". Five seeds for the headline orderings (FedGC > FedPE, reset and kept momentum;
# FedFV > FedAwS > FedUV-511; FedFR's modules; FedGPAD < FedPAD < Fused < Single). Every FedGC
# table: spot checks of Tables 2, 4 and 10 gave other digits for archived runs (BUILD_NOTES, "The
# run archive"). FedFace's rows moved with
# `fedface.reduction` (FedFV 3, FedFR Fig. 4). The rest lack archived runs.
# A paper's tables are together: they land together (runs are shared between them), so each paper
# can land as soon as its own runs have ended.
FULL=("fedgc12 0,1,2,3,4" "fedgc1 0,1,2" "fedgc2 0,1,2" "fedgc3 0,1,2" "fedgc4 0,1,2"
      "fedgc5 0,1,2" "fedgc6 0,1,2" "fedgc7 0,1,2" "fedgc8 0,1,2" "fedgc9 0,1,2"
      "fedgc10 0,1,2" "fedgc11 0,1,2"
      "fedfv3 0,1,2,3,4" "fedfv1 0,1,2" "fedfv2 0,1,2" "fedfv4 0"
      "fedfr1 0,1,2,3,4" "fedfr_fig4 0,1,2" "fedfr2 0,1,2" "fedfr_fig3 0,1,2"
      "pad3 0,1,2,3,4" "pad1 0,1,2" "pad8 0,1,2" "pad9 0,1,2" "pad10 0,1,2"
      "pad_all_batch_norm 0" "pad_terms 0,1" "pad5 0,1,2" "pad6 0,1,2" "pad7 0,1,2"
      "pad_fedma 0,1,2"
      "privacy1 0" "privacy2 0" "blocks2 0,1,2" "blocks1 0,1,2" "personalization1 0,1,2")

case $mode in
  spot)
    for table in "${SPOT[@]+"${SPOT[@]}"}"; do
      echo "== $table"
      python -m fedjax_face.reproduce --table="$table" --spot_check --root="$root" \
          --archive="$archive" || echo "== $table: differs or failed (above); the queue goes on"
    done ;;
  full)
    rm -f "$drain"
    python "$(dirname "$0")/share_runs.py" "$root" "$lane" "${FULL[@]}"
    [[ -e $drain ]] && { echo "== drained: the tables are made when the queue has run"; exit 0; }
    for i in "${!FULL[@]}"; do
      (( i % lanes == lane )) || continue
      read -r table seeds <<< "${FULL[$i]}"
      echo "== $table (seeds $seeds)"
      # The tables go beside the runs, not into the worktree: a changed tracked file there would
      # make every later run's code '+dirty' (io/provenance.py).
      mkdir -p "$root/docs"
      python -m fedjax_face.reproduce --table="$table" --seeds="$seeds" --root="$root" \
          --out_dir="$root/docs" --archive_to="$archive" \
          || echo "== $table: not made (above); the queue goes on"
    done ;;
  status)
    for entry in "${FULL[@]}"; do
      read -r table seeds <<< "$entry"
      missing=$(python -m fedjax_face.reproduce --table="$table" --seeds="$seeds" --root="$root" \
                    --dry_run --allow_mixed_commits | { grep '^missing: ' || true; } | sort -u \
                | wc -l)
      echo "$table (seeds $seeds): $missing runs missing"
    done
    python "$(dirname "$0")/share_runs.py" --hours "$root" "$(dirname "$0")/../results" \
        "${FULL[@]}" ;;
  park)
    for entry in "${FULL[@]}"; do
      read -r table seeds <<< "$entry"
      python -m fedjax_face.reproduce --table="$table" --seeds="$seeds" --root="$root" --park
    done ;;
  land)
    paper=${3:?$usage}
    mine=()
    for entry in "${FULL[@]}"; do
      read -r table seeds <<< "$entry"
      [[ $table == "$paper"[0-9_]* ]] && mine+=("$entry")
    done
    (( ${#mine[@]} )) || { echo "no table of paper '$paper' in the queue" >&2; exit 2; }
    for entry in "${mine[@]}"; do
      read -r table seeds <<< "$entry"
      missing=$(python -m fedjax_face.reproduce --table="$table" --seeds="$seeds" --root="$root" \
                    --dry_run --allow_mixed_commits | { grep -c '^missing: ' || true; })
      (( missing == 0 )) || { echo "$table lacks $missing runs under $root; nothing changed" >&2
                              exit 1; }
    done
    rm -rf "results/${paper}_tables"
    for entry in "${mine[@]}"; do
      read -r table seeds <<< "$entry"
      python -m fedjax_face.reproduce --table="$table" --seeds="$seeds" --root="$root" \
          --dry_run --archive_to=results > /dev/null
      python -m fedjax_face.reproduce --table="$table" --seeds="$seeds" \
          --root="results/${paper}_tables" --out_dir=docs --dry_run > /dev/null
      echo "$table: archived in results/${paper}_tables, docs made from there"
    done
    python -m fedjax_face.tools.claims
    python -m fedjax_face.tools.claims --check || true ;;
  *) echo "mode $mode; expected spot, full, park, status, land or drain" >&2; exit 2 ;;
esac
