#!/usr/bin/env bash
# Mutation testing of the modules qbench exists for (issue 16), with mutmut 3 (the `mutation`
# extra: pip install -e ".[mutation]"). Not run by CI: it takes tens of minutes on two cores.
#
#   scripts/mutation.sh                 # every module below, in this order
#   scripts/mutation.sh formulas compare  # some of them
#
# Each module is mutated in its own copy of the committed tree (git archive HEAD, so work in
# progress in the checkout is not measured) under $MUTATION_DIR (default /tmp/qbench-mutation),
# with only its own tests selected; mutmut then runs, per mutant, the selected tests that reach
# the mutated function. The summary line per module (killed / survived / no tests / timeout /
# score) goes to $MUTATION_DIR/<module>/score.txt and stdout; `mutmut results` and
# `mutmut show NAME` in that folder show the survivors. docs/testing.md has the last scores.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="${MUTATION_DIR:-/tmp/qbench-mutation}"
JOBS="${MUTATION_JOBS:-2}"
PY="${PYTHON:-python}"

# module: file to mutate | tests | mutant-name globs (empty: every function of the file)
declare -A FILE TESTS ONLY
FILE[formulas]=qbench/formulas.py
TESTS[formulas]="tests/test_formulas.py tests/test_fixture_contract.py"
FILE[ledger]=qbench/schemes/ledger.py
TESTS[ledger]="tests/test_ledger.py"
FILE[metrics]=qbench/metrics.py
TESTS[metrics]="tests/test_metrics.py tests/test_metrics_traps.py"
FILE[stats]=qbench/timing/stats.py
TESTS[stats]="tests/timing/test_stats.py tests/timing/test_adaptive.py"
FILE[adaptive]=qbench/timing/adaptive.py
TESTS[adaptive]="tests/timing/test_adaptive.py"
FILE[compare]="qbench/readers/compare.py qbench/judge.py"
TESTS[compare]="tests/readers/test_compare.py tests/readers/test_compare_exact.py tests/test_judge.py tests/test_fault_kinds.py"
ONLY[compare]="qbench.judge.x__interval__mutmut_* qbench.judge.x_verdict__mutmut_* qbench.judge.x_capture_failure__mutmut_* qbench.judge.x_unusable_note__mutmut_* qbench.readers.compare.x_compare_docs__mutmut_* qbench.readers.compare.x__why__mutmut_* qbench.readers.compare.x_run_compare__mutmut_*"
FILE[crossover]=qbench/readers/report.py
TESTS[crossover]="tests/readers/test_report.py tests/readers/test_report_crossover_exact.py"
ONLY[crossover]="qbench.readers.report.x_m_ranges__mutmut_* qbench.readers.report.x_crossover__mutmut_*"
FILE[recommend]="qbench/readers/recommend.py qbench/judge.py"
TESTS[recommend]="tests/readers/test_recommend.py tests/readers/test_recommend_exact.py tests/test_judge.py"
ONLY[recommend]="qbench.judge.x_pareto_front__mutmut_* qbench.readers.recommend.x_recommend__mutmut_* qbench.readers.recommend.x__lose_reason__mutmut_* qbench.readers.recommend.x__point__mutmut_* qbench.readers.recommend.x_summary_rows__mutmut_* qbench.readers.recommend.x__eager_us__mutmut_*"
# the runner's failure paths: how a worker's end becomes rows (runner.py) and its reason (lifecycle.py)
FILE[runner]="qbench/runner.py qbench/lifecycle.py"
TESTS[runner]="tests/test_fault_kinds.py"
ONLY[runner]="qbench.runner.xǁ_Workersǁrows__mutmut_* qbench.lifecycle.x__death_reason__mutmut_* qbench.lifecycle.x_log_tail__mutmut_* qbench.lifecycle.x__last_line__mutmut_*"
FILE[shard]=qbench/tp/shard.py
TESTS[shard]="tests/tp/test_shard.py tests/test_fault_kinds.py"

ORDER=(formulas ledger metrics stats adaptive compare crossover runner shard recommend)
[ $# -gt 0 ] && ORDER=("$@")

mkdir -p "$WORK"
for mod in "${ORDER[@]}"; do
  file="${FILE[$mod]:?unknown module $mod (known: ${!FILE[*]})}"
  dir="$WORK/$mod"
  rm -rf "$dir" && mkdir -p "$dir"
  git -C "$ROOT" archive HEAD | tar -x -C "$dir"
  {
    echo "[mutmut]"
    echo "source_paths = qbench"
    echo "only_mutate ="
    for f in $file; do echo "    $f"; done
    echo "pytest_add_cli_args_test_selection ="
    for t in ${TESTS[$mod]}; do [ -e "$dir/$t" ] && echo "    $t"; done
    echo "pytest_add_cli_args ="
    echo "    -p"
    echo "    no:cacheprovider"
    echo "    -q"
    echo "also_copy ="
    for extra in results scenarios docs scripts README.md; do echo "    $extra"; done
    echo "process_isolation = forkserver"
    echo "use_git_change_detection = false"
  } > "$dir/setup.cfg"
  start=$(date +%s)
  # shellcheck disable=SC2086
  (cd "$dir" && "$PY" -m mutmut run --max-children "$JOBS" ${ONLY[$mod]:-} > mutmut.log 2>&1) || true
  (cd "$dir" && "$PY" -m mutmut results --all true > results.txt 2>&1) || true
  "$PY" - "$dir" "$mod" "$file" "$(( $(date +%s) - start ))" <<'EOF' | tee "$dir/score.txt"
import collections, re, sys
from pathlib import Path
d, mod, file, secs = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
counts = collections.Counter()
for line in (d / "results.txt").read_text().splitlines():
    m = re.match(r"\s*(\S+__mutmut_\d+): (.+)$", line)
    if m:
        counts[m.group(2).strip()] += 1
killed = counts["killed"]
scored = killed + counts["survived"] + counts["timeout"] + counts["no tests"]
score = 100 * (killed + counts["timeout"]) / scored if scored else float("nan")
other = {k: v for k, v in counts.items() if k not in ("killed", "survived", "timeout", "no tests")}
print(f"{mod} ({file}): {killed} killed, {counts['timeout']} timeout, {counts['survived']} survived, "
      f"{counts['no tests']} no tests{', other ' + str(other) if other else ''}; "
      f"score {score:.1f} % ({secs} s)")
EOF
done
