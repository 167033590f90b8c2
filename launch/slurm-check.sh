#!/usr/bin/env bash
# Check launch/fedforest.sbatch on a throw-away one-node Slurm cluster.
#
#   make slurm-check        (or: launch/slurm-check.sh)
#
# Brings up munged, slurmctld and slurmd in a temporary folder (its own
# slurm.conf, state, logs and ports; nothing under /etc is touched), submits
# the template with the demo job exactly as docs/slurm.md says (train, then
# predict), waits, checks that the model and the predictions exist, and
# stops every daemon it started, by its pid.
#
# Needs root (slurmd starts jobs as their user) and Debian's slurm-wlm and
# munge packages (apt-get install slurm-wlm munge).  Without them it says so
# and exits 0: the check is opt-in and not part of `make test`.
# Set KEEP=1 to keep the temporary folder (logs) after a success.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}

missing=()
for cmd in munged slurmctld slurmd sbatch sinfo squeue; do
    command -v "$cmd" >/dev/null 2>&1 || missing+=("$cmd")
done
if [[ ${#missing[@]} -gt 0 ]]; then
    echo "slurm-check: skipped: ${missing[*]} not found; it needs Debian's slurm-wlm and munge packages" \
         "(apt-get install slurm-wlm munge)"
    exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
    echo "slurm-check: skipped: it needs root (slurmd runs the jobs as their user)"
    exit 0
fi
if [[ ! -x $PY ]]; then
    echo "slurm-check: $PY not found; run make venv first" >&2
    exit 2
fi

TMP=$(mktemp -d /tmp/fedforest-slurm-check.XXXXXX)
chmod 700 "$TMP"
HOST=$(hostname -s)
CPUS=$(nproc)
PIDS=()

stop_daemons() {
    local i
    for (( i=${#PIDS[@]}-1; i>=0; i-- )); do
        kill "${PIDS[$i]}" 2>/dev/null
    done
    for (( i=${#PIDS[@]}-1; i>=0; i-- )); do
        for _ in $(seq 50); do kill -0 "${PIDS[$i]}" 2>/dev/null || break; sleep 0.1; done
        kill -9 "${PIDS[$i]}" 2>/dev/null
    done
    PIDS=()
}

fail() {
    echo "slurm-check: FAILED: $*" >&2
    for log in "$TMP"/log/*.log "$TMP"/demo/*.out; do
        [[ -f $log ]] && { echo "--- $log" >&2; tail -n 30 "$log" >&2; }
    done
    stop_daemons
    echo "slurm-check: logs kept in $TMP" >&2
    exit 1
}
trap 'stop_daemons' EXIT
trap 'fail "interrupted"' INT TERM

mkdir -p "$TMP"/{munge,etc,state,spool,log,demo}
chmod 711 "$TMP/munge"

# a free pair of ports for slurmctld and slurmd (a site's own Slurm may use the default ones)
PORT=$(( 20000 + RANDOM % 20000 ))
while (echo > /dev/tcp/127.0.0.1/$PORT) 2>/dev/null || (echo > /dev/tcp/127.0.0.1/$((PORT + 1))) 2>/dev/null; do
    PORT=$(( PORT + 2 ))
done

echo "slurm-check: one-node cluster '$HOST' with $CPUS CPUs in $TMP (ports $PORT, $((PORT + 1)))"

dd if=/dev/urandom of="$TMP/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$TMP/munge/munge.key"
munged --foreground --force --key-file="$TMP/munge/munge.key" --socket="$TMP/munge/munge.socket" \
       --pid-file="$TMP/munge/munged.pid" --log-file="$TMP/log/munged.log" \
       --seed-file="$TMP/munge/munged.seed" > "$TMP/log/munged.out" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do [[ -S $TMP/munge/munge.socket ]] && break; sleep 0.1; done
[[ -S $TMP/munge/munge.socket ]] || fail "munged did not start"

export SLURM_CONF=$TMP/etc/slurm.conf
cat > "$SLURM_CONF" <<EOF
ClusterName=ffcheck
SlurmctldHost=$HOST
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$TMP/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$TMP/state
SlurmdSpoolDir=$TMP/spool
SlurmctldPidFile=$TMP/state/slurmctld.pid
SlurmdPidFile=$TMP/spool/slurmd.pid
SlurmctldLogFile=$TMP/log/slurmctld.log
SlurmdLogFile=$TMP/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
NodeName=$HOST CPUs=$CPUS State=UNKNOWN
PartitionName=check Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF

slurmctld -D -i -f "$SLURM_CONF" > "$TMP/log/slurmctld.out" 2>&1 &
PIDS+=($!)
slurmd -D -f "$SLURM_CONF" -N "$HOST" > "$TMP/log/slurmd.out" 2>&1 &
PIDS+=($!)

state=""
for _ in $(seq 120); do
    state=$(sinfo -h -n "$HOST" -o %T 2>/dev/null | head -n 1)
    [[ $state == idle* ]] && break
    sleep 0.5
done
[[ $state == idle* ]] || fail "the node did not come up (state '${state:-none}')"
sinfo

"$PY" -m fedforest demo-data --out "$TMP/demo" || fail "demo-data"
JOB=$TMP/demo/job.toml
# this checks Slurm, not encryption: the demo job with plain labels (its Paillier labels slow each tree down)
sed -i 's/^label_privacy = .*/label_privacy = "plain"/' "$JOB"
grep -qx 'label_privacy = "plain"' "$JOB" || fail "the demo job has no label_privacy line"

submit() {
    echo "+ sbatch $*"
    (cd "$ROOT" && timeout 900 sbatch --wait --output="$TMP/demo/slurm-%j.out" "$@")
}

# as docs/slurm.md says, from the repository
submit launch/fedforest.sbatch train "$JOB" --overwrite --n-estimators 10 \
    || fail "the training job failed"
submit launch/fedforest.sbatch predict "$JOB" --data "$TMP/demo/test-party1.csv" "$TMP/demo/test-party2.csv" \
    || fail "the prediction job failed"
for out in "$TMP"/demo/slurm-*.out; do
    echo "--- $(basename "$out")"
    cat "$out"
done

[[ -f $TMP/demo/model/master/manifest.json ]] || fail "no master model"
for p in 1 2; do
    [[ -f $TMP/demo/model/party-$p/manifest.json ]] || fail "no model of party $p"
done
[[ -s $TMP/demo/predictions.csv ]] || fail "no predictions"
echo "predictions: $(( $(wc -l < "$TMP/demo/predictions.csv") - 1 )) rows in $TMP/demo/predictions.csv"

# srun without a PMI plugin: every task a world of 1; fedforest must say so (exit code 2)
echo "+ sbatch --wrap 'srun -n 3 python -m fedforest train ...'   (no --mpi)"
(cd "$ROOT" && timeout 300 sbatch --wait --ntasks=3 --overcommit --output="$TMP/demo/nopmi.out" \
    --wrap "srun -n 3 $PY -m fedforest train --config $JOB --overwrite")
code=$?
cat "$TMP/demo/nopmi.out"
[[ $code -eq 2 ]] || fail "srun without --mpi: exit code $code, expected 2"
grep -q "PMI is not connected" "$TMP/demo/nopmi.out" || fail "srun without --mpi: no PMI message"

# refused input (a label column no party holds): one line, every task exits 2 by itself (no MPI_Abort)
sed 's/^label_column = .*/label_column = "no_such_column"/' "$JOB" > "$TMP/demo/bad.toml"
submit launch/fedforest.sbatch train "$TMP/demo/bad.toml" --overwrite
code=$?
bad_out=$(ls -t "$TMP"/demo/slurm-*.out | head -1)
echo "--- $(basename "$bad_out")"
cat "$bad_out"
[[ $code -eq 2 ]] || fail "refused input: exit code $code, expected 2"
grep -q "error: label_column: 'no_such_column'" "$bad_out" || fail "refused input: no one-line error"
grep -q "Killed\|MPI_Abort" "$bad_out" && fail "refused input: the tasks were killed, not ended with exit code 2"

# a party killed with kill -9 in the middle of training: named at once, its task exits with 3
echo "+ sbatch launch/fedforest.sbatch train $JOB --overwrite --n-estimators 3000 --batch-memory-mb 1; kill -9 party 2"
(cd "$ROOT" && timeout 600 sbatch --wait --output="$TMP/demo/killed.out" launch/fedforest.sbatch train "$JOB" \
    --overwrite --n-estimators 3000 --batch-memory-mb 1) &
WAITER=$!
victim=""
for _ in $(seq 600); do
    if [[ -f $TMP/demo/model/master/manifest.json ]] && grep -q '"n_trees": [1-9]' "$TMP/demo/model/master/manifest.json"; then
        for p in $(pgrep -f "fedforest train --config $JOB"); do
            tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx SLURM_PROCID=2 || continue
            parent=$(awk '{print $4}' "/proc/$p/stat" 2>/dev/null)
            tr '\0' '\n' < "/proc/$parent/environ" 2>/dev/null | grep -qx SLURM_PROCID=2 && victim=$p
        done
    fi
    [[ -n $victim ]] && break
    sleep 0.1
done
[[ -n $victim ]] || fail "did not find party 2's process"
kill -9 "$victim"
echo "killed pid $victim (party 2) at $(date +%T)"
wait "$WAITER"
code=$?
echo "job ended at $(date +%T) with exit code $code"
cat "$TMP/demo/killed.out"
# srun ends the step (--kill-on-bad-exit) and reports the highest status: the dead
# rank's 3, or 143 for the ranks it stopped with SIGTERM
[[ $code -ne 0 ]] || fail "a killed party: exit code 0"
grep -q "error: party 2 (rank 2) on host $HOST died: killed by signal 9" "$TMP/demo/killed.out" \
    || fail "a killed party: not named"
grep -q "task 2: Exited with exit code 3" "$TMP/demo/killed.out" || fail "a killed party: not exit code 3"

stop_daemons
if [[ ${KEEP:-0} == 1 ]]; then
    echo "slurm-check: kept $TMP"
else
    rm -rf "$TMP"
fi
echo "slurm-check: OK"
