# shellcheck shell=bash
# Jobs on the node: `kubectl create job` runs its pod to completion (the Job controller
# creates it, the kubelet runs it), `kubectl wait --for=condition=complete` returns,
# `kubectl logs job/...` prints what it wrote; a Job whose pod fails with backoffLimit 0
# reaches Failed with reason BackoffLimitExceeded; an Indexed Job with
# backoffLimitPerIndex and a FailIndex rule fails one index by its exit code and ends
# Failed with reason FailedIndexes; a running Job pod deleted by hand counts as failed
# (the batch.kubernetes.io/job-tracking finalizer), and a deleted Job's pods go.
# Sourced by e2e/single-node.sh; uses its step/ok/fail/k helpers.

# wait_job CONDITION JOB: kubectl wait (at most 90 s) for the Job's condition; when it
# does not come, the Job and its pods are shown and the step fails.
wait_job() {
  local out
  out=$(timeout 100 "$KUBECTL" wait --for=condition="$1" "job/$2" --timeout=90s 2>&1) || {
    k get job "$2" -o yaml >&2 || true
    k get pods -l "batch.kubernetes.io/job-name=$2" -o wide >&2 || true
    fail "job $2 did not reach $1: $out"
  }
  grep -q 'condition met' <<<"$out" || fail "kubectl wait said: $out"
}

step "kubectl create job: the pod runs to completion, kubectl wait and logs job/ see it"
k delete job e2e-job e2e-job-fails --ignore-not-found --wait=true >/dev/null 2>&1 || true
out=$(k create job e2e-job --image=busybox -- sh -c 'echo job-ran-$((6 * 7))' 2>&1) ||
  fail "kubectl create job: $out"
wait_job complete e2e-job
st=$(k get job e2e-job -o 'jsonpath={.status.succeeded}/{.status.active}/{.status.completionTime}')
# active 0 is left out, as upstream's Go omitempty leaves it out.
[[ $st == 1//20* ]] || fail "job status succeeded/active/completionTime is '$st'"
out=$(k logs job/e2e-job 2>&1) || fail "kubectl logs job/e2e-job: $out"
grep -qx 'job-ran-42' <<<"$out" || fail "kubectl logs job/e2e-job printed: $out"
fins=$(k get pods -l batch.kubernetes.io/job-name=e2e-job -o 'jsonpath={.items[*].metadata.finalizers}')
! grep -q 'batch.kubernetes.io/job-tracking' <<<"$fins" ||
  fail "the counted pod of job e2e-job still carries the tracking finalizer: $fins"
ok "job e2e-job Complete (succeeded 1), its pod printed job-ran-42 and lost its tracking finalizer"

step "a Job whose pod fails with backoffLimit 0 is Failed (BackoffLimitExceeded)"
out=$(k apply -f - 2>&1 <<'EOF'
apiVersion: batch/v1
kind: Job
metadata:
  name: e2e-job-fails
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: fail
        image: busybox
        command: ["sh", "-c", "exit 3"]
EOF
) || fail "kubectl apply of job e2e-job-fails: $out"
wait_job failed e2e-job-fails
reason=$(k get job e2e-job-fails -o 'jsonpath={.status.conditions[?(@.type=="Failed")].reason}')
[ "$reason" = BackoffLimitExceeded ] || fail "Failed condition reason is '$reason'"
k delete job e2e-job e2e-job-fails --wait=true >/dev/null 2>&1 ||
  fail "kubectl delete of the jobs failed"
ok "job e2e-job-fails Failed with BackoffLimitExceeded; both jobs deleted"

step "an Indexed Job with backoffLimitPerIndex: a FailIndex exit code fails that index only"
out=$(k apply -f - 2>&1 <<'EOF'
apiVersion: batch/v1
kind: Job
metadata:
  name: e2e-job-indexes
spec:
  completionMode: Indexed
  completions: 3
  parallelism: 3
  backoffLimitPerIndex: 1
  podFailurePolicy:
    rules:
    - action: FailIndex
      onExitCodes: {operator: In, values: [42]}
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: work
        image: busybox
        command: ["sh", "-c", "[ \"$JOB_COMPLETION_INDEX\" != 0 ] || exit 42"]
EOF
) || fail "kubectl apply of job e2e-job-indexes: $out"
wait_job failed e2e-job-indexes
st=$(k get job e2e-job-indexes -o 'jsonpath={.status.conditions[?(@.type=="Failed")].reason} {.status.failedIndexes} {.status.completedIndexes} {.status.failed}')
[ "$st" = "FailedIndexes 0 1,2 1" ] ||
  fail "reason, failedIndexes, completedIndexes, failed are '$st' (want 'FailedIndexes 0 1,2 1')"
n=$(k get pods -l batch.kubernetes.io/job-name=e2e-job-indexes -o name | wc -l)
[ "$n" = 3 ] || fail "the job ran $n pods, want 3 (index 0 is not retried after FailIndex)"
k delete job e2e-job-indexes --wait=true >/dev/null 2>&1 || fail "kubectl delete of job e2e-job-indexes failed"
ok "job e2e-job-indexes Failed (FailedIndexes): index 0 failed by its exit code 42, indexes 1,2 completed"

# deleted_pod_counts_as_failed JOB POLICY: a Job (podReplacementPolicy POLICY) whose
# running pod is deleted with kubectl: the pod goes, the Job counts one failure, and
# once the Job is deleted its pods go too.
deleted_pod_counts_as_failed() {
  local job=$1 policy=$2 out pod="" failed="" left=""
  # A short grace period: busybox's sleep ignores SIGTERM.
  out=$(k apply -f - 2>&1 <<EOF
apiVersion: batch/v1
kind: Job
metadata:
  name: $job
spec:
  podReplacementPolicy: $policy
  template:
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 2
      containers:
      - name: sleep
        image: busybox
        command: ["sleep", "3600"]
EOF
  ) || fail "kubectl apply of job $job: $out"
  for _ in $(seq 1 60); do
    pod=$(k get pods -l "batch.kubernetes.io/job-name=$job" \
      -o 'jsonpath={range .items[?(@.status.phase=="Running")]}{.metadata.name}{end}' 2>/dev/null) || true
    [ -n "$pod" ] && break
    sleep 1
  done
  [ -n "$pod" ] || fail "the pod of job $job is not Running after 60 s"
  out=$(k get pod "$pod" -o 'jsonpath={.metadata.finalizers}')
  grep -q 'batch.kubernetes.io/job-tracking' <<<"$out" ||
    fail "pod $pod carries finalizers '$out', without batch.kubernetes.io/job-tracking"
  out=$(timeout 100 "$KUBECTL" delete pod "$pod" --wait=true --timeout=90s 2>&1) ||
    fail "kubectl delete pod $pod (job $job): $out"
  for _ in $(seq 1 30); do
    failed=$(k get job "$job" -o 'jsonpath={.status.failed}')
    [ "$failed" = 1 ] && break
    sleep 1
  done
  [ "$failed" = 1 ] || fail "job $job counts '$failed' failed pods after its running pod was deleted, want 1"
  k delete job "$job" --wait=true >/dev/null 2>&1 || fail "kubectl delete of job $job failed"
  for _ in $(seq 1 60); do
    left=$(k get pods -l "batch.kubernetes.io/job-name=$job" -o name 2>/dev/null)
    [ -z "$left" ] && break
    sleep 1
  done
  [ -z "$left" ] || fail "pods of the deleted job $job left after 60 s: $left"
}

step "a running Job pod deleted by hand counts as failed; a deleted Job's pods let go of the tracking finalizer"
deleted_pod_counts_as_failed e2e-job-deleted TerminatingOrFailed
deleted_pod_counts_as_failed e2e-job-replace-failed Failed
ok "a deleted running pod: 1 failed for podReplacementPolicy TerminatingOrFailed and Failed; the deleted Jobs' pods are gone"
