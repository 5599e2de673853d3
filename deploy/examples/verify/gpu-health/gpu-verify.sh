#!/bin/sh
# noderoll's example GPU verify (`spec.verify` of a DeploymentPolicy; deploy/examples/verify/gpu-health).
#
# Runs in the window's verify pod: privileged, the node's root at $NODEROLL_ROOT (/host), hostPID.
# DCGM's quick diagnostic (`dcgmi diag -r 1`) where `dcgmi` exists, else `nvidia-smi`; exit 0 when the
# GPUs pass, else a line `gpu-verify: FAILED: ...` and a non-zero exit (noderoll then fails the window).
# Each tool is looked for in this image first, then on the node (run chrooted into its root), then in
# the GPU Operator's driver root on the node (/run/nvidia/driver).
#
#   exit 0  the GPUs passed
#   exit 1  the tool reported a failure (a diagnostic test failed, uncorrected ECC errors, no GPU listed)
#   exit 2  neither dcgmi nor nvidia-smi was found
#   exit 3  the tool itself failed (no driver loaded, no DCGM host engine): its output is printed
#
# Settings (environment of the image): DCGM_DIAG_LEVEL (default 1), DCGM_HOST (the nv-hostengine to
# ask, `host:port`; default dcgmi's own, localhost).
set -u
ROOT="${NODEROLL_ROOT:-/host}"
LEVEL="${DCGM_DIAG_LEVEL:-1}"
OUT="$(mktemp)"
trap 'rm -f "$OUT"' EXIT

failed() {
    echo "gpu-verify: FAILED: $2" >&2
    exit "$1"
}

# Prints how to run tool $1: "<tool>" (this image) or "chroot <root> <tool>" (the node); nothing: none.
find_tool() {
    if command -v "$1" >/dev/null 2>&1; then
        echo "$1"
        return
    fi
    for root in "$ROOT" "$ROOT/run/nvidia/driver"; do
        for dir in /usr/bin /usr/local/bin /usr/sbin /bin; do
            if [ -x "$root$dir/$1" ]; then
                echo "chroot $root $dir/$1"
                return
            fi
        done
    done
}

verify_dcgm() {
    host_arg=""
    if [ -n "${DCGM_HOST:-}" ]; then
        host_arg="--host $DCGM_HOST"
    fi
    echo "gpu-verify: $1 diag -r $LEVEL $host_arg"
    # shellcheck disable=SC2086  # $1 and $host_arg are words on purpose
    $1 diag -r "$LEVEL" $host_arg >"$OUT" 2>&1
    code=$?
    cat "$OUT"
    if grep -Eq '\|[[:space:]]*(Fail|FAIL)' "$OUT"; then
        failed 1 "dcgmi diag -r $LEVEL: a test failed: $(grep -E '\|[[:space:]]*(Fail|FAIL)' "$OUT" | head -n 3 | tr -s ' ' | tr '\n' ';')"
    fi
    if [ "$code" -ne 0 ]; then
        failed 3 "dcgmi diag -r $LEVEL exited $code (is a DCGM host engine running? set DCGM_HOST)"
    fi
    echo "gpu-verify: PASSED: dcgmi diag -r $LEVEL"
}

verify_smi() {
    echo "gpu-verify: $1 --query-gpu=index,pci.bus_id,ecc.errors.uncorrected.volatile.total"
    # shellcheck disable=SC2086
    $1 --query-gpu=index,pci.bus_id,ecc.errors.uncorrected.volatile.total --format=csv,noheader >"$OUT" 2>&1
    code=$?
    cat "$OUT"
    if [ "$code" -ne 0 ]; then
        failed 3 "nvidia-smi exited $code: $(tail -n 1 "$OUT")"
    fi
    gpus=$(grep -c ',' "$OUT")
    if [ "$gpus" -eq 0 ]; then
        failed 1 "nvidia-smi lists no GPU"
    fi
    # Uncorrected (volatile) ECC errors since the driver loaded: a GPU that must not run jobs. [N/A]: no ECC.
    bad=$(awk -F', *' '$3 ~ /^[0-9]+$/ && $3 > 0 { printf "GPU %s (%s): %s uncorrected ECC error(s); ", $1, $2, $3 }' "$OUT")
    if [ -n "$bad" ]; then
        failed 1 "${bad%; }"
    fi
    echo "gpu-verify: PASSED: nvidia-smi: $gpus GPU(s), no uncorrected ECC error"
}

dcgmi=$(find_tool dcgmi)
if [ -n "$dcgmi" ]; then
    verify_dcgm "$dcgmi"
    exit 0
fi
smi=$(find_tool nvidia-smi)
if [ -n "$smi" ]; then
    verify_smi "$smi"
    exit 0
fi
failed 2 "neither dcgmi nor nvidia-smi found (in the image, in $ROOT or in $ROOT/run/nvidia/driver): is this a GPU node with its driver installed?"
