# Sourced by scripts/test.sh and bindings/test_all.sh: runs a test suite with its output kept
# in a log, counts the tests its runner reports, and prints one summary line per suite.
# A suite fails when its command fails, when a test fails, or when it ran no test at all (a
# runner that found nothing to run must not look like a pass).
#
#   suites_init FILE         where the summary records go (shared with nested scripts)
#   suite NAME KIND CMD...   KIND: ctest, pytest, cargo, go (how to read its counts), or
#                            script: one test whose exit status is the result (0 passed,
#                            77 skipped, having printed why: neither a pass nor a failure)
#   step NAME CMD...         a step that runs no tests (configure, build)
#   suites_summary [FROM [LABEL]]  prints records FROM (line number, default 1) on and a
#                            line "LABEL: N passed, N failed, N skipped" (default total);
#                            returns 1 when any of them failed

suites_init() {
  export BSPA_SUITES_FILE=$1
  mkdir -p "$(dirname "$1")"
}

# Prints "passed failed skipped" from a runner's log.
suites_count() { # kind log
  local kind=$1 log=$2
  case $kind in
    ctest) # "100% tests passed, 1 tests failed out of 17"; skipped tests are listed after it
      local total failed skipped
      total=$(grep -Eo 'tests failed out of [0-9]+' "$log" | grep -Eo '[0-9]+$' | tail -1)
      failed=$(grep -Eo '[0-9]+ tests failed out of' "$log" | grep -Eo '^[0-9]+' | tail -1)
      skipped=$(grep -Ec '\((Skipped|Disabled)\)$' "$log")
      total=${total:-0} failed=${failed:-0}
      echo "$((total - failed - skipped)) $failed $skipped" ;;
    pytest) # the last "N failed, N passed, N skipped, N error in 1.2s" line
      local line
      line=$(grep -E '[0-9]+ (passed|failed|skipped|errors?)\b' "$log" | tail -1)
      local p f s e
      p=$(grep -Eo '[0-9]+ passed' <<<"$line" | grep -Eo '[0-9]+')
      f=$(grep -Eo '[0-9]+ failed' <<<"$line" | grep -Eo '[0-9]+')
      s=$(grep -Eo '[0-9]+ skipped' <<<"$line" | grep -Eo '[0-9]+')
      e=$(grep -Eo '[0-9]+ errors?' <<<"$line" | grep -Eo '[0-9]+')
      echo "${p:-0} $(( ${f:-0} + ${e:-0} )) ${s:-0}" ;;
    cargo) # every "test result: ok. 5 passed; 0 failed; 1 ignored; ..." (lib, tests, doctests)
      grep -Eo 'test result: [A-Za-z]+\. [0-9]+ passed; [0-9]+ failed; [0-9]+ ignored' "$log" |
        awk '{p += $4; f += $6; s += $8} END {print p + 0, f + 0, s + 0}' ;;
    go) # `go test -v`: top-level "--- PASS: TestX" lines (subtests are indented)
      echo "$(grep -Ec '^--- PASS' "$log") $(grep -Ec '^--- FAIL' "$log") $(grep -Ec '^--- SKIP' "$log")" ;;
    *) echo "suites: unknown kind $kind" >&2; echo "0 0 0" ;;
  esac
}

suites_record() { # name status [passed failed skipped]
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "${3:-}" "${4:-}" "${5:-}" >>"$BSPA_SUITES_FILE"
}

step() { # name command...
  local name=$1; shift
  echo "==> $name"
  if "$@"; then suites_record "$name" passed; else suites_record "$name" FAILED; fi
}

suite() { # name kind command...
  local name=$1 kind=$2; shift 2
  local log
  log=$(mktemp "${TMPDIR:-/tmp}/bspa-suite.XXXXXX")
  echo "==> $name"
  "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]} passed failed skipped status=passed
  if [ "$kind" = script ]; then
    case $rc in 0) set -- 1 0 0 ;; 77) set -- 0 0 1 ;; *) set -- 0 1 0 ;; esac
    passed=$1 failed=$2 skipped=$3
  else
    read -r passed failed skipped < <(suites_count "$kind" "$log")
  fi
  rm -f "$log"
  if [ "$kind" = script ] && [ "$rc" -eq 77 ]; then
    status="SKIPPED (see above)"
  elif [ "$rc" -ne 0 ] || [ "$failed" -gt 0 ]; then
    status=FAILED
  elif [ "$passed" -eq 0 ]; then
    status="FAILED (ran no test)"
  fi
  suites_record "$name" "$status" "$passed" "$failed" "$skipped"
}

suites_summary() { # [from [label]]
  local from=${1:-1} label=${2:-total} bad=0 tp=0 tf=0 ts=0
  local name status p f s
  while IFS=$'\t' read -r name status p f s; do
    if [ -n "$p" ]; then
      printf '%-34s %-8s %s passed, %s failed, %s skipped\n' "$name" "$status" "$p" "$f" "$s"
      tp=$((tp + p)) tf=$((tf + f)) ts=$((ts + s))
    else
      printf '%-34s %s\n' "$name" "$status"
    fi
    # A step or suite that failed without a failed test (a build, an example) counts as one.
    if [ "${status%% *}" = FAILED ]; then bad=1; [ "${f:-0}" -gt 0 ] || tf=$((tf + 1)); fi
  done < <(tail -n "+$from" "$BSPA_SUITES_FILE")
  # The closing line, in the plain "N passed, N failed" form that CI reads.
  echo "$label: $tp passed, $tf failed, $ts skipped"
  return $bad
}
