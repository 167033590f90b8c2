#!/usr/bin/env bash
# Start a fedforest job on one machine, or on the hosts your mpiexec is set up
# for: one master rank plus one rank per party.
#
# Usage:
#   launch/mpirun.sh [NPARTIES] <train|predict> <job.toml> [extra flags]
#   NPARTIES=2 launch/mpirun.sh train job.toml --max-depth 8
#
# The number of parties comes from the first argument when it is a number,
# else from the NPARTIES environment variable.  Extra flags are passed to
# fedforest unchanged (see docs/config.md).
# Uses .venv/bin/mpiexec and .venv/bin/python of this repository when present,
# else mpiexec and python3 from PATH; set MPIEXEC or PYTHON to override.
set -euo pipefail

usage() {
    echo "usage: $0 [NPARTIES] <train|predict> <job.toml> [extra flags]" >&2
    echo "       (or set NPARTIES in the environment)" >&2
    exit 2
}

if [[ $# -ge 1 && $1 =~ ^[0-9]+$ ]]; then
    NPARTIES=$1
    shift
fi
[[ $# -ge 2 ]] || usage
COMMAND=$1
CONFIG=$2
shift 2

case "$COMMAND" in
    train|predict) ;;
    *) echo "$0: command must be train or predict, got '$COMMAND'" >&2; usage ;;
esac
if [[ -z "${NPARTIES:-}" || ! "$NPARTIES" =~ ^[0-9]+$ || "$NPARTIES" -lt 1 ]]; then
    echo "$0: give the number of parties as first argument or in NPARTIES" >&2
    usage
fi
if [[ ! -f "$CONFIG" ]]; then
    echo "$0: config file '$CONFIG' not found" >&2
    exit 2
fi

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ -z "${MPIEXEC:-}" ]]; then
    if [[ -x "$ROOT/.venv/bin/mpiexec" ]]; then MPIEXEC="$ROOT/.venv/bin/mpiexec"; else MPIEXEC=mpiexec; fi
fi
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi

NRANKS=$((NPARTIES + 1))
echo "+ $MPIEXEC -n $NRANKS $PYTHON -m fedforest $COMMAND --config $CONFIG $*" >&2
exec "$MPIEXEC" -n "$NRANKS" "$PYTHON" -m fedforest "$COMMAND" --config "$CONFIG" "$@"
