# shellcheck shell=bash
# Two lanes for .ci/run: the machine has two cores, and most stages are either a
# single-threaded interpreter (Miri, loom's models, the fuzzer) or a build of their own
# target directory, so two of them side by side take little more than the longer one.
#
# `job NAME STAGE...` queues a job: its stages run one after another in one lane (a
# job groups the stages that share a target directory or follow from each other).
# `run_lanes` starts two workers that take the queued jobs in order, so queue the
# longest first. Each stage's output goes to a log that is printed whole, with its
# time and lane, when the stage ends (never two logs interleaved); a stage that fails
# ends its job, the other jobs go on, and the run fails at the end naming it.
#
# A stage is a shell function or command line; its name is its first word.

CI_LOGS=target/ci
CI_JOBS=()
declare -A CI_FREES=()

# `frees JOB DIR...`: directories (a job's own target directories) removed when the job
# ends, passed or failed. The CI machine's disk is not ours to size: stop 77's run ran
# out of it while a lane built the fuzzer, with every stage's build still on disk.
frees() { # job, directory...
  local name=$1; shift
  CI_FREES[$name]="$*"
}

# The free space where the run builds, as `df -h` says it (for the stage lines).
disk_free() { df -h --output=avail . 2>/dev/null | tail -1 | tr -d ' '; }

job() { # name, stage...
  local name=$1; shift
  # CI_ONLY="job job ...": run only those jobs (to try a stage without the rest).
  if [[ -n ${CI_ONLY:-} && " $CI_ONLY " != *" $name "* ]]; then return 0; fi
  local stage
  for stage in "$@"; do CI_JOBS+=("$name|$stage"); done
  CI_JOBS+=("$name|")
}

# Runs one stage of a job in lane $1, logging it. Returns the stage's exit code.
run_stage() { # lane, stage command line
  local lane=$1 cmd=$2 name rc=0 t0=$SECONDS
  name=${cmd%% *}
  local log=$CI_LOGS/$name.log
  # In the background and then waited for: a subshell tested by `||` would run with
  # `set -e` off, so a stage's first failing command would not end it.
  # CI_LANE: a stage that must not share a target directory with the other lane
  # (cargo holds a target directory's lock while `cargo test` runs its tests, not
  # only while it builds) keys the directory by it.
  (set -euo pipefail; export CI_LANE=$lane; eval "$cmd") >"$log" 2>&1 </dev/null &
  wait $! || rc=$?
  local took=$((SECONDS - t0))
  echo "$name $took $lane $rc" >>"$CI_LOGS/times"
  {
    flock 9
    echo "=== stage: $name (lane $lane)"
    cat "$log"
    echo "=== stage: $name took $took s (lane $lane, $(disk_free) free on disk)"
    [[ $rc -eq 0 ]] || echo "=== stage $name FAILED with exit code $rc"
  } 9>"$CI_LOGS/print.lock"
  return "$rc"
}

# Takes the next job's index from the shared counter.
next_job() {
  local i
  {
    flock 8
    i=$(<"$CI_LOGS/next")
    echo $((i + 1)) >"$CI_LOGS/next"
  } 8>"$CI_LOGS/queue.lock"
  echo "$i"
}

# The queue as job start indices, so a worker takes a whole job at once.
run_lanes() {
  rm -rf "$CI_LOGS"
  mkdir -p "$CI_LOGS"
  : >"$CI_LOGS/times"
  local starts=() i
  for ((i = 0; i < ${#CI_JOBS[@]}; i++)); do
    if [[ $i -eq 0 || -z ${CI_JOBS[$((i - 1))]#*|} ]]; then starts+=("$i"); fi
  done
  local jobs=("${CI_JOBS[@]}")
  # Each worker sees the queue through `starts`: the counter indexes jobs, not entries.
  CI_JOBS=()
  local s
  for s in "${starts[@]}"; do CI_JOBS+=("$s"); done
  echo 0 >"$CI_LOGS/next"
  lane_worker() {
    # Not `run_stage ... || failed=1`: a function called under `||` runs with `set -e`
    # off, and so would every subshell it starts, the stage's own included.
    set +e
    local lane=$1 k
    while :; do
      k=$(next_job)
      [[ $k -lt ${#CI_JOBS[@]} ]] || return 0
      local i=${CI_JOBS[$k]} entry failed=0
      while [[ $i -lt ${#jobs[@]} ]]; do
        entry=${jobs[$i]#*|}
        [[ -n $entry ]] || break
        if [[ $failed -eq 0 ]]; then
          run_stage "$lane" "$entry"
          [[ $? -eq 0 ]] || failed=1
        else
          echo "${entry%% *} 0 $lane skipped" >>"$CI_LOGS/times"
        fi
        i=$((i + 1))
      done
      local job=${jobs[$i]%%|*}
      # shellcheck disable=SC2086
      [[ -z ${CI_FREES[$job]:-} ]] || rm -rf ${CI_FREES[$job]}
    done
  }
  lane_worker A &
  local a=$!
  lane_worker B &
  local b=$!
  wait "$a" "$b" || true
}

# The table of stages (in the order they ended), and the first failure, if any.
# Returns non-zero when a stage failed or was skipped after a failure.
report_lanes() {
  local name took lane rc failed=
  echo "=== stages (wall seconds, lane)"
  printf '%-34s %8s  %s\n' stage seconds lane
  while read -r name took lane rc; do
    printf '%-34s %8s  %s%s\n' "$name" "$took" "$lane" \
      "$([[ $rc == 0 ]] || echo "  ($([[ $rc == skipped ]] && echo skipped || echo "exit $rc"))")"
    if [[ -z $failed && $rc != 0 && $rc != skipped ]]; then failed="$name $rc"; fi
  done <"$CI_LOGS/times"
  if [[ -n $failed ]]; then
    CURRENT_STAGE=${failed% *}
    return "${failed##* }"
  fi
}
