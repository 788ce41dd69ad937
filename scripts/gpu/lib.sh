# Shared by scripts/gpu/gpu_bench.sh and gpu_check.sh (sourced, not run): one deadline for the whole GPU window,
# the carried wheels, the preflight, and phases that each start only while the budget still holds them.
# The caller sets ROOT (the repository root), PY, OUTDIR, BUDGET (seconds) and START (epoch seconds) first.

MD=$OUTDIR/${REPORT:-gpu_bench}.md
LOG=$OUTDIR/${REPORT:-gpu_bench}.log
SITE=${SITE:-/tmp/zoo_site}
mkdir -p "$OUTDIR"

left() { echo $((START + BUDGET - $(date +%s))); }
log() { echo "== $(date +%T) [$(left) s left] $*" | tee -a "$LOG" >&2; }

install_wheels() {
  # the GPU machine has no network: everything its image lacks comes as wheels in .whl/ (scripts/gpu/wheels.py)
  if ! ls "$ROOT"/.whl/*.whl >/dev/null 2>&1; then
    log "no wheels in .whl/: run scripts/gpu/gpu_bench.sh --prepare here, and carry [\".whl\", \".bench_assets\"]"
    return 1
  fi
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$ROOT"/.whl/*.whl 2>&1 \
    | grep -v "Running pip as the 'root' user" | tee -a "$LOG"
  ((PIPESTATUS[0] == 0)) || { log "pip could not install .whl/ (above)"; return 1; }
  export PYTHONPATH="$SITE:$ROOT"
  log "installed $(ls "$ROOT"/.whl/*.whl | wc -l) wheels into $SITE"
}

preflight() {
  # stage 1 names a missing package in well under 10 s (no imports); stage 2 imports every domain
  timeout 120 "$PY" "$ROOT/scripts/gpu/preflight.py" 2>&1 | tee -a "$LOG" >&2
  local rc=${PIPESTATUS[0]}
  { echo "preflight: exit $rc"; grep '^preflight:' "$LOG" | tail -3; echo; } >> "$MD"
  return "$rc"
}

# phase NAME SECONDS KIND CMD...: run CMD if at least SECONDS of the budget are left, killed at the deadline.
# KIND: table (append the `## zoo bench` table it prints), tail (append its last metric lines), none.
phase() {
  local name=$1 need=$2 kind=$3 t0=$SECONDS rc
  shift 3
  local budget
  budget=$(left)
  if ((budget < need)); then
    log "skip $name: $budget s left, it needs about $need s"
    echo "| $name | skipped | $budget s were left, it needs about $need s |" >> "$OUTDIR/phases.md"
    return 0
  fi
  log "start $name: $*"
  timeout --kill-after=10 "$budget" "$@" > "$OUTDIR/phase.out" 2>&1
  rc=$?
  cat "$OUTDIR/phase.out" >> "$LOG"
  case $kind in
    table) sed -n '/^## zoo bench/,$p' "$OUTDIR/phase.out" >> "$MD" ;;
    tail) { echo "**$name** \`$*\`"; echo '```'; grep -v "it/s" "$OUTDIR/phase.out" \
            | grep -E "test/|val/|best checkpoint|images/s|Error|error:|^(torch|device|precision) " | tail -25
            echo '```'; } >> "$MD" ;;
  esac
  ((rc == 124 || rc == 137)) && echo "(cut at the deadline: $name)" >> "$MD"
  echo >> "$MD"
  log "end $name: exit $rc after $((SECONDS - t0)) s"
  echo "| $name | exit $rc | $((SECONDS - t0)) s |" >> "$OUTDIR/phases.md"
  rm -f "$OUTDIR/phase.out"
}

# The phase table at the end of the report: what ran, how long each took (the estimates' next values).
close_report() {
  { echo "## Phases (budget $BUDGET s, $(left) s left at the end)"; echo; echo "| phase | result | time |"
    echo "|---|---|---|"; cat "$OUTDIR/phases.md" 2>/dev/null; } >> "$MD"
  rm -f "$OUTDIR/phases.md"
  log "done: $MD"
}
