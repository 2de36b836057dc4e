# Sourced by the user scripts (launch.sh, bench.sh, regress.sh): their
# arguments in any order. `pb_parse_args "<script options>" "$@"` splits them:
#   PB_WORDS     the words that are not options (hostfile, scenario, ...), in order
#   PB_RUN_ARGS  the `prefill-bench run` options, each with its value
#                (--set, --cuts, --variants, -o/--output take one; any other -x is a flag)
#   PB_SET_ARGS  the --set options alone: what `prefill-bench ranks` takes
#   PB_FLAGS     the script's own options, name -> value (1 for a flag)
# <script options> lists the script's own, space-separated; one that takes a
# value ends in '=' ("--dry-run --max-regression="). A value follows its
# option as the next word or after '=' (--set=k=v, --max-regression=3%).
#
# `pb_script_args "<usage>" "<script options>" <min words> <max words> "$@"`
# does the same, then prints the usage and exits: 0 for -h/--help, 2 when the
# number of words is outside [min, max].

pb_parse_args() {
  local spec=" $1 "
  shift
  PB_WORDS=() PB_RUN_ARGS=() PB_SET_ARGS=()
  declare -gA PB_FLAGS=()
  while (($#)); do
    local arg=$1 name=${1%%=*}
    if [[ $spec == *" $arg "* ]]; then
      PB_FLAGS[$arg]=1
    elif [[ $spec == *" $name= "* ]]; then
      if [[ $arg == *=* ]]; then
        PB_FLAGS[$name]=${arg#*=}
      else
        pb_need_value "$@"
        PB_FLAGS[$name]=$2
        shift
      fi
    else
      case $arg in
        --set | --cuts | --variants | --output | -o)
          pb_need_value "$@"
          PB_RUN_ARGS+=("$arg" "$2")
          [[ $arg == --set ]] && PB_SET_ARGS+=("$arg" "$2")
          shift
          ;;
        --set=*) PB_RUN_ARGS+=("$arg") PB_SET_ARGS+=("$arg") ;;
        -*) PB_RUN_ARGS+=("$arg") ;;
        *) PB_WORDS+=("$arg") ;;
      esac
    fi
    shift
  done
}

pb_need_value() {  # pb_need_value <option> <the words after it...>
  (($# >= 2)) && return 0
  echo "$(basename "$0"): $1 needs a value" >&2
  exit 2
}

pb_script_args() {
  local usage=$1 spec=$2 min=$3 max=$4
  shift 4
  pb_parse_args "$spec --help -h" "$@"
  [[ -n ${PB_FLAGS[--help]:-}${PB_FLAGS[-h]:-} ]] && { echo "$usage"; exit 0; }
  ((${#PB_WORDS[@]} >= min && ${#PB_WORDS[@]} <= max)) || { echo "$usage" >&2; exit 2; }
}
