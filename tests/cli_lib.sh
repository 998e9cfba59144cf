# Helpers of the command-line tests, sourced by them. The sourcing script sets compress (the
# binary), work (a scratch folder) and fails=0, and exits with fails != 0 at the end.

fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}

# run EXPECTED_STATUS NAME ARGS...: runs compress, keeping stdout and stderr in $work/NAME.*
run() {
  local want=$1 name=$2
  shift 2
  "$compress" "$@" >"$work/$name.out" 2>"$work/$name.err"
  local got=$?
  if [[ $got != "$want" ]]; then
    fail "$name: compress $* exited $got, expected $want"
    sed 's/^/    /' "$work/$name.err" | tail -20
  else
    echo "ok   $name (exit $got)"
  fi
}

# expect_in NAME out|err TEXT: TEXT is in the kept stdout or stderr of run NAME
expect_in() {
  grep -qF -- "$3" "$work/$1.$2" || {
    fail "$1: '$3' is not in its std$2:"
    sed 's/^/    /' "$work/$1.$2"
  }
}

# one_line_error NAME TEXT: run NAME printed one line on stderr, holding TEXT
one_line_error() {
  local lines
  lines=$(wc -l <"$work/$1.err")
  [[ $lines == 1 ]] || fail "$1: $lines lines on stderr, expected 1"
  expect_in "$1" err "$2"
}
