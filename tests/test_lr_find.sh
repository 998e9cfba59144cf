#!/usr/bin/env bash
# compress lr-find end to end on real data: Fashion-MNIST's test images (Debian's
# dataset-fashion-mnist) imported with 'compress data import idx', swept with a small untrained
# CNN (tests/fixtures/golden/fashion_cnn.onnx). The SVG chart must be well-formed XML (Python's
# xml.etree), the JSON valid, and the suggestion inside [--min, --max]; the loss must fall
# somewhere in the sweep. Bad arguments exit 2, a missing data file exits 1 with one line.
#
# usage: test_lr_find.sh COMPRESS FIXTURES
set -u
py=${CX_PYTHON:?"the tests' Python (ctest sets it: tests/CMakeLists.txt, CX_PYTHON)"}
compress=$1
fixtures=$2
fmnist=/usr/share/datasets/fashion-mnist
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0

source "$(dirname "$(realpath "${BASH_SOURCE[0]}")")/cli_lib.sh" || { echo "FAIL: tests/cli_lib.sh did not load"; exit 1; }

model=$fixtures/golden/fashion_cnn.onnx
run 0 import data import idx "$fmnist/t10k-images-idx3-ubyte.gz" "$fmnist/t10k-labels-idx1-ubyte.gz" \
  -o "$work/fmnist.h5"

run 0 sweep lr-find "$model" --data "$work/fmnist.h5" --min 1e-5 --max 10 --steps 80 --batch 64 \
  --mean 0.286 --std 0.353 --svg "$work/lr.svg" --json --threads 2
head -c 300 "$work/sweep.out"
echo
$py - "$work/lr.svg" "$work/sweep.out" <<'EOF' || fail "sweep: the chart or the JSON is wrong"
import json, math, sys
import xml.etree.ElementTree as ET

root = ET.parse(sys.argv[1]).getroot()
ns = "{http://www.w3.org/2000/svg}"
assert root.tag == ns + "svg", root.tag
texts = [t.text or "" for t in root.iter(ns + "text")]
assert any("learning rate" in t for t in texts), "no x-axis label"
assert any(t.startswith("1e") for t in texts), "no decade labels"
assert any(t.startswith("suggested:") for t in texts), "no suggestion marked"
assert len(list(root.iter(ns + "polyline"))) == 2, "expected two curves"

r = json.load(open(sys.argv[2]))
lo, hi, lr = r["min_lr"], r["max_lr"], r["suggested_lr"]
assert lo <= lr <= hi, f"suggested {lr} outside [{lo}, {hi}]"
assert lo <= r["min_div10_lr"] * 10 <= hi
pts = r["points"]
assert len(pts) == r["steps"] and 2 <= len(pts) <= 80
rates = [p["lr"] for p in pts]
assert all(b > a for a, b in zip(rates, rates[1:])), "rates not increasing"
assert abs(math.log10(rates[0]) - math.log10(lo)) < 1e-6
smooth = [p["smoothed"] for p in pts if p["smoothed"] is not None]
assert min(smooth) < smooth[0] - 0.05, f"the loss never fell: {smooth[0]} -> {min(smooth)}"
print(f"suggested lr {lr:.3g} (steepest step {r['steepest_step']}), min/10 "
      f"{r['min_div10_lr']:.3g}, {len(pts)} steps, diverged {r['diverged']}")
EOF

# the text form: a table, the suggestion, the chart's path
run 0 text lr-find "$model" --data "$work/fmnist.h5" --steps 20 --batch 32 --svg "$work/t.svg" \
  --quiet --threads 2
grep -q "suggested learning rate" "$work/text.out" || fail "text: no suggestion printed"
grep -q "chart: $work/t.svg" "$work/text.out" || fail "text: chart path not printed"

run 2 no_data lr-find "$model"
run 2 bad_range lr-find "$model" --data "$work/fmnist.h5" --min 1 --max 0.1
run 2 bad_option lr-find "$model" --data "$work/fmnist.h5" --nope
run 1 missing lr-find "$model" --data "$work/missing.h5" --quiet
[[ $(wc -l <"$work/missing.err") == 1 ]] || fail "missing: more than one line on stderr"
grep -q "missing.h5" "$work/missing.err" || fail "missing: the message does not name the file"

echo "lr-find: $fails failure(s)"
exit $((fails != 0))
