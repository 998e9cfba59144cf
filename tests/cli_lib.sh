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

# fmnist_slice SIDE: $work/train.h5 (1200 images) and $work/test.h5 (500) from Debian's
# Fashion-MNIST, resized to SIDExSIDE, with the class names; exits when the data are missing.
fmnist_slice() {
  local fm=/usr/share/datasets/fashion-mnist
  local names="T-shirt/top,Trouser,Pullover,Dress,Coat,Sandal,Shirt,Sneaker,Bag,Ankle boot"
  [[ -f $fm/train-images-idx3-ubyte.gz ]] || {
    echo "FAIL: $fm is missing (scripts/install-deps.sh installs dataset-fashion-mnist)"
    exit 1
  }
  run 0 import-train data import idx $fm/train-images-idx3-ubyte.gz \
    $fm/train-labels-idx1-ubyte.gz -o "$work/train60k.h5" --val-fraction 0.02 --seed 1 \
    --class-names "$names"
  run 0 import-test data import idx $fm/t10k-images-idx3-ubyte.gz \
    $fm/t10k-labels-idx1-ubyte.gz -o "$work/test10k.h5" --val-fraction 0.05 --seed 1 \
    --class-names "$names"
  run 0 shrink-train data augment "$work/train60k.h5" --part val --size "$1x$1" --crop none \
    -o "$work/train.h5"
  run 0 shrink-test data augment "$work/test10k.h5" --part val --size "$1x$1" --crop none \
    -o "$work/test.h5"
  rm -f "$work/train60k.h5" "$work/test10k.h5"
}
