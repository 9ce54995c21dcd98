#!/usr/bin/env bash
# Compile dense_pe.v + tb_dense.v with Icarus Verilog and run it on one vector directory.
#
#   examples/rtl/run.sh VECTOR_DIR
#
# VECTOR_DIR holds x.hex, w.hex, bias.hex, mult.hex, shift.hex (see README.md); the simulation
# writes acc_out.hex and y_out.hex there (and the compiled tb_dense.vvp).
#
# Settings, each NAME=integer, from (later wins): the defaults below, VECTOR_DIR/params.env
# (lines NAME=value, '#' comments), the environment:
#   K M N ACC_BITS SATURATE BIAS_PRELOAD     compile-time parameters
#   X_ZP OUT_ZP ACT_MIN ACT_MAX              run-time scalars (plusargs)
# DEFINES (environment only): extra iverilog arguments, e.g. DEFINES="-DBUG_ROUND_HALF_UP".
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="${1:?usage: run.sh VECTOR_DIR}"
[ -d "$dir" ] || { echo "run.sh: $dir is not a directory" >&2; exit 2; }
dir="$(cd "$dir" && pwd)"

names=(K M N ACC_BITS SATURATE BIAS_PRELOAD X_ZP OUT_ZP ACT_MIN ACT_MAX)
declare -A cfg=([K]=64 [M]=8 [N]=16 [ACC_BITS]=32 [SATURATE]=1 [BIAS_PRELOAD]=0
                [X_ZP]=0 [OUT_ZP]=0 [ACT_MIN]=-128 [ACT_MAX]=127)
is_name() { local n; for n in "${names[@]}"; do [ "$n" = "$1" ] && return 0; done; return 1; }
is_int() { [[ "$1" =~ ^-?[0-9]+$ ]]; }

if [ -f "$dir/params.env" ]; then
    lineno=0
    while IFS= read -r line || [ -n "$line" ]; do
        lineno=$((lineno + 1))
        line="${line%%#*}"
        line="${line//[[:space:]]/}"
        [ -z "$line" ] && continue
        key="${line%%=*}"; val="${line#*=}"
        if [ "$key" = "$line" ] || ! is_name "$key" || ! is_int "$val"; then
            echo "run.sh: $dir/params.env line $lineno: expected NAME=integer with NAME in ${names[*]}" >&2
            exit 2
        fi
        cfg[$key]="$val"
    done < "$dir/params.env"
fi
for n in "${names[@]}"; do
    if [ -n "${!n:-}" ]; then
        is_int "${!n}" || { echo "run.sh: $n=${!n} is not an integer" >&2; exit 2; }
        cfg[$n]="${!n}"
    fi
done

params=()
for n in K M N ACC_BITS SATURATE BIAS_PRELOAD; do params+=("-Ptb_dense.$n=${cfg[$n]}"); done
# shellcheck disable=SC2086  # DEFINES is a list of arguments
iverilog -g2012 -Wall ${DEFINES:-} "${params[@]}" -o "$dir/tb_dense.vvp" "$here/dense_pe.v" "$here/tb_dense.v"
vvp -n "$dir/tb_dense.vvp" "+DIR=$dir" "+X_ZP=${cfg[X_ZP]}" "+OUT_ZP=${cfg[OUT_ZP]}" \
    "+ACT_MIN=${cfg[ACT_MIN]}" "+ACT_MAX=${cfg[ACT_MAX]}"
