#!/usr/bin/env bash
# compress pipeline end to end, on 1200 Fashion-MNIST images at 16x16 (as test_train_cli.sh
# makes them): a ResNet-20 teacher and a MobileNetV2-0.5 student trained from scratch, one short
# epoch each.
#   - a run writes teacher.onnx and student_scratch.onnx (with the preprocessing metadata),
#     checkpoints/<stage>/, one metrics.jsonl with every line's "stage",
#     tensorboard/, the stage manifest and the report (check_report.py: every row measured, its
#     cost and sizes counted again with onnx + numpy + gzip, the summary line rebuilt);
#   - a re-run that skips every stage writes the report again with the same figures, also when a
#     model no longer imports (its row says why in the cells it could not measure); a teacher
#     given as ONNX is evaluated for it; with [distill], the report has the three rows and
#     ONNX Runtime scores the ONNX files to the report's top-1 (onnx_top1.py); a distillation
#     interrupted and resumed reads the teacher cache (a count of the teacher's batches) and
#     ends where an uninterrupted one does;
#   - `compress FILE.toml` is the same command; a re-run skips the complete stages; --only and
#     --from run the stages they name; a changed setting reruns its stage and the later ones;
#   - bad files (unknown key with a suggestion, missing data file, class count of the teacher
#     against the data, a training key in a PTQ [quantize], [distill] where distillation is not
#     built in) exit 1
#     with one line naming file:line:col.
#
# usage: test_pipeline.sh COMPRESS
set -u
compress=$(realpath "$1")
here=$(dirname "$(realpath "$0")")
py=${CX_PYTHON:?"the tests' Python (ctest sets it: tests/CMakeLists.txt, CX_PYTHON)"}
work=$(mktemp -d)
if [[ -n ${KEEP:-} ]]; then echo "keeping $work"; else trap 'rm -rf "$work"' EXIT; fi
cd /
export OMP_NUM_THREADS=1
fails=0

source "$here/cli_lib.sh" || { echo "FAIL: tests/cli_lib.sh did not load"; exit 1; }

# config_error NAME SED_EXPR POSITION TEXT: the file edited by SED_EXPR fails with one line
# "compress pipeline: bad.toml:POSITION: ...TEXT..."
config_error() {
  sed "$2" "$work/pipe.toml" >"$work/bad.toml"
  run 1 "$1" pipeline "$work/bad.toml" --out "$work/run_bad"
  one_line_error "$1" "compress pipeline: $work/bad.toml:$3: "
  expect_in "$1" err "$4"
}

fmnist_slice 16

cat >"$work/pipe.toml" <<'EOF'
# a tiny pipeline: 24 steps of teacher, 24 of student
[run]
out_dir = "run"
seed = 3
threads = 1

[data]
train = "train.h5"
val = "test.h5"
batch = 50
crop = "pad"
pad = 1
flip = true
mean = [0.286]
std = [0.353]

[teacher]
spec = "resnet20:classes=10,input=1x16x16"

[teacher.train]
epochs = 1
lr = 0.1
momentum = 0.9
log_every = 4
checkpoint_every = 10

[student]
spec = "mobilenet_v2:width=0.5,classes=10,input=1x16x16"

[student.train]
epochs = 1
lr = 0.05
momentum = 0.9
log_every = 4

[export]
opset = 13
EOF

# ---- a full run ----
r=$work/run
run 0 first pipeline "$work/pipe.toml"
for f in teacher.onnx student_scratch.onnx metrics.jsonl stages/teacher.done \
  stages/scratch.done checkpoints/teacher/step-00000024.h5 checkpoints/scratch/step-00000024.h5; do
  [[ -f $r/$f ]] || fail "first: $r/$f is missing"
done
ls "$r"/tensorboard/events.out.tfevents.* >/dev/null 2>&1 || fail "first: no tensorboard file"
expect_in first out "teacher: 24 steps"
expect_in first out "scratch: 24 steps"
$py - "$r/metrics.jsonl" <<'EOF' || fail "first: metrics.jsonl"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert all(list(l)[:4] == ["step", "epoch", "time", "stage"] for l in lines), lines[0]
assert {l["stage"] for l in lines} == {"teacher", "scratch"}, {l["stage"] for l in lines}
assert not [k for l in lines for k in l if "/" in k], "a stage prefix in a metric's name"
assert any(l["stage"] == "teacher" and "val_top1" in l for l in lines)
assert any(l["stage"] == "scratch" and "loss" in l for l in lines)
EOF
# the report: both rows measured, curves, the preprocessing; kept to compare with a re-run
expect_in first out "report: $r/report.html (also report.md, report.json)"
$py "$here/check_report.py" "$r" --models "teacher,student (scratch)" >/dev/null ||
  fail "first: the report"
cp "$r/report.json" "$work/report_first.json"
# the preprocessing in the metadata, read back by compress eval
run 0 eval-student eval "$r/student_scratch.onnx" --data "$work/test.h5"
expect_in eval-student out "top-1"

# ---- re-runs ----
run 0 again "$work/pipe.toml"
expect_in again out "teacher: complete"
expect_in again out "scratch: complete"
# every stage skipped: the report is written again, with the figures from the manifest
$py "$here/check_report.py" "$r" --models "teacher,student (scratch)" \
  --same "$work/report_first.json" >/dev/null || fail "again: the report differs"
# a model our runtime cannot import (an op we lack, ONNX Runtime has: Sinh after the logits)
# still gets its row: the reason in the cells we could not measure, the rest measured
cp -r "$r" "$work/run_sinh"
$py - "$work/run_sinh/student_scratch.onnx" <<'EOF' || fail "sinh: could not write the model"
import onnx, sys
m = onnx.load(sys.argv[1])
g = m.graph
last = g.node[-1]
out = last.output[0]
last.output[0] = out + "_before_sinh"
g.node.append(onnx.helper.make_node("Sinh", [last.output[0]], [out], name="sinh"))
onnx.save(m, sys.argv[1])
EOF
run 0 sinh pipeline "$work/pipe.toml" --out "$work/run_sinh"
expect_in sinh err "student (scratch)"
expect_in sinh err "not imported"
$py - "$work/run_sinh" <<'EOF' || fail "sinh: the report"
import json, sys
d = sys.argv[1]
r = json.load(open(d + "/report.json"))
teacher, student = r["models"]
assert not teacher["errors"] and teacher["macs"] > 0, teacher
for k in ("params", "params_nonzero", "macs", "macs_effective", "cpu_ms_batch1"):
    assert student[k] is None and student["errors"][k]["reason"] == "not imported", (k, student)
    assert "Sinh" in student["errors"][k]["message"], student["errors"][k]
assert student["onnx_bytes"] > 0 and student["onnx_gzip_bytes"] > 0 and student["top1"] > 0
if r["onnxruntime"]:
    assert student["ort_ms_batch1"] > 0, student
assert "nan" not in r["summary"] and "MACs" not in r["summary"], r["summary"]
row = [l for l in open(d + "/report.md") if l.startswith("| student (scratch) |")][0]
assert row.count("not imported") == 6, row
EOF
run 0 only pipeline "$work/pipe.toml" --only scratch
grep -q "^teacher" "$work/only.out" && fail "only: the teacher stage ran"
expect_in only out "scratch: 24 steps"
run 0 from pipeline "$work/pipe.toml" --from teacher
expect_in from out "teacher: 24 steps"
expect_in from out "scratch: 24 steps"
sed 's/^lr = 0.05/lr = 0.04/' "$work/pipe.toml" >"$work/pipe2.toml"
run 0 changed pipeline "$work/pipe2.toml" --out "$r"
expect_in changed out "teacher: complete"
expect_in changed out "scratch: 24 steps"
# an interrupted stage continues from its last checkpoint, to the same numbers
run 1 stopped pipeline "$work/pipe.toml" --out "$work/run_s" --stop-after 13
expect_in stopped err "interrupted at step 13"
[[ -f $work/run_s/checkpoints/teacher/step-00000013.h5 ]] || fail "stopped: no checkpoint at 13"
run 0 resumed pipeline "$work/pipe.toml" --out "$work/run_s"
expect_in resumed out "teacher: resuming from $work/run_s/checkpoints/teacher/step-00000013.h5"
$py - "$r/metrics.jsonl" "$work/run_s/metrics.jsonl" <<'EOF' || fail "resumed: metrics differ"
import json, sys
def first(p, stage):
    return [l["val_top1"] for l in map(json.loads, open(p))
            if l["stage"] == stage and "val_top1" in l][0]
for stage in ("teacher", "scratch"):
    a, b = first(sys.argv[1], stage), first(sys.argv[2], stage)
    assert a == b, (stage, a, b)
EOF

# a teacher given as ONNX is checked and exported again with the metadata
sed -e 's|^spec = "resnet20.*|onnx = "run/teacher.onnx"|' -e '/^\[teacher.train\]/,/^$/d' \
  "$work/pipe.toml" >"$work/pipe_onnx.toml"
run 0 onnx-teacher pipeline "$work/pipe_onnx.toml" --out "$work/run_o" --only teacher
expect_in onnx-teacher out "teacher: exporting"
[[ -f $work/run_o/teacher.onnx ]] || fail "onnx-teacher: no teacher.onnx"
# ... and evaluated for the report: the same top-1 as when it was trained
$py - "$r/report.json" "$work/run_o/report.json" <<'EOF' || fail "onnx-teacher: report top-1"
import json, sys
a, b = (json.load(open(p))["models"][0] for p in sys.argv[1:])
assert b["name"] == "teacher" and b["train_seconds"] is None, b
assert abs(a["top1"] - b["top1"]) <= 0.05, (a["top1"], b["top1"])
EOF

# [distill]: runs where distill/ is built in (the student distilled from the teacher above);
# refused before anything trains, naming the table, where it is not
cp "$work/pipe.toml" "$work/pipe_kd.toml"
printf '\n[distill]\ntemperature = 4.0\nalpha = 0.9\nepochs = 2\nlr = 0.05\nmomentum = 0.9\n' \
  >>"$work/pipe_kd.toml"
"$compress" pipeline "$work/pipe_kd.toml" --out "$r" >"$work/kd.out" 2>"$work/kd.err"
kd=$?
if [[ $kd == 0 ]]; then
  echo "ok   kd (distillation built in)"
  expect_in kd out "teacher: complete"
  expect_in kd out "distill: 48 steps"
  expect_in kd out "distill: teacher outputs of 48 batches computed, 0 read from the cache"
  [[ -f $r/student.onnx ]] || fail "kd: no student.onnx"
  $py "$here/check_report.py" "$r" --models "teacher,student (scratch),student (distilled)" \
    >/dev/null || fail "kd: the report"
  top1=$(grep -o 'distill: .*validation top-1 [0-9.]*%' "$work/kd.out" | grep -o '[0-9.]*%$')
  grep -q "^| student (distilled) | $top1 |" "$r/report.md" || fail "kd: the report's top-1"
  # ONNX Runtime scores the exported models as their metadata says: the report's top-1
  if $py -c "import onnxruntime" 2>/dev/null; then
    $py "$here/onnx_top1.py" "$r" >"$work/top1.out" 2>&1 || fail "kd: onnx_top1.py"
    sed 's/^/    /' "$work/top1.out"
  else
    echo "skip ONNX Runtime top-1: onnxruntime is not importable by $py (scripts/install-deps.sh)"
  fi
  # interrupted in its second epoch and resumed, the distillation reads every batch's teacher
  # outputs from the cache the run above filled, each from its own epoch's file, and ends with
  # the same student as the run that was not interrupted
  cp "$r/stages/distill.done" "$work/distill_whole.done"
  run 1 kd-stopped pipeline "$work/pipe_kd.toml" --out "$r" --only distill --stop-after 30
  expect_in kd-stopped err "distill: interrupted at step 30"
  run 0 kd-resumed pipeline "$work/pipe_kd.toml" --out "$r"
  expect_in kd-resumed out "distill: resuming from $r/checkpoints/distill/step-00000030.h5"
  expect_in kd-resumed out "distill: teacher outputs of 0 batches computed, 48 read from the cache"
  for k in val_top1 val_loss; do
    [[ $(grep "^$k " "$r/stages/distill.done") == $(grep "^$k " "$work/distill_whole.done") ]] ||
      fail "kd-resumed: $k is not the uninterrupted run's"
  done
  # [prune] after [distill]: the distilled student channel-pruned to half its MACs and
  # fine-tuned under distillation, reading the teacher cache of the distill stage's epoch 0;
  # the report gets its row; stopped and resumed, it writes the same file byte for byte
  cp "$work/pipe_kd.toml" "$work/pipe_pr.toml"
  printf '\n[prune]\nmethod = "channel"\nsparsity = 0.5\nepochs = 1\nlr = 0.02\nmomentum = 0.9\n' \
    >>"$work/pipe_pr.toml"
  run 0 prune pipeline "$work/pipe_pr.toml" --out "$r"
  expect_in prune out "distill: complete"
  expect_in prune out "prune: 24 steps"
  expect_in prune out "prune: teacher outputs of 0 batches computed, 24 read from the cache"
  # the cut alone (BatchNorm recalibrated after it), before the fine-tune, scored and reported
  # beside the stage's own top-1
  expect_in prune out "layers recalibrated on 32 batches of"
  expect_in prune out "prune: pruned, before fine-tuning: validation top-1"
  grep -q "Stage prune, pruned, before fine-tuning: top-1 [0-9.]*%" "$r/report.md" ||
    fail "prune: the report's note on the model before fine-tuning"
  $py "$here/check_report.py" "$r" \
    --models "teacher,student (scratch),student (distilled),student (pruned)" >/dev/null ||
    fail "prune: the report"
  $py - "$r/report.json" <<'EOF' || fail "prune: MACs not halved"
import json, sys
m = {x["name"]: x for x in json.load(open(sys.argv[1]))["models"]}
assert m["student (pruned)"]["macs"] <= 0.5 * m["student (distilled)"]["macs"], m
EOF
  cp "$r/student_pruned.onnx" "$work/pruned_whole.onnx"
  run 1 prune-stopped pipeline "$work/pipe_pr.toml" --out "$r" --only prune --stop-after 10
  run 0 prune-resumed pipeline "$work/pipe_pr.toml" --out "$r"
  expect_in prune-resumed out "prune: resuming from $r/checkpoints/prune/step-00000010.h5"
  cmp -s "$r/student_pruned.onnx" "$work/pruned_whole.onnx" ||
    fail "prune-resumed: student_pruned.onnx differs from the uninterrupted run's"
  # magnitude pruning: masks kept through the fine-tune, stopped and resumed: exact zeros
  sed -e 's/^method = "channel"/method = "magnitude"/' \
    -e 's/^sparsity = 0.5/sparsity = 0.7\nend = 12\nevery = 4/' \
    "$work/pipe_pr.toml" >"$work/pipe_mag.toml"
  run 1 mag-stopped pipeline "$work/pipe_mag.toml" --out "$r" --only prune --stop-after 14
  run 0 mag-resumed pipeline "$work/pipe_mag.toml" --out "$r"
  expect_in mag-resumed out "prune: resuming from $r/checkpoints/prune/step-00000014.h5"
  $py "$here/check_zeros.py" "$r/student_pruned.onnx" 0.7 || fail "mag-resumed: the zeros"
  # gradual channel pruning: channels masked at steps 0, 4, 8 and 12 (the MAC target reached
  # at 12), stopped between two pruning steps and resumed; the trained, masked model rewritten
  # with half the MACs
  sed -e 's/^sparsity = 0.5/sparsity = 0.5\nend = 12\nevery = 4/' "$work/pipe_pr.toml" \
    >"$work/pipe_gch.toml"
  run 1 gch-stopped pipeline "$work/pipe_gch.toml" --out "$r" --only prune --stop-after 6
  run 0 gch-resumed pipeline "$work/pipe_gch.toml" --out "$r"
  expect_in gch-resumed out "prune: resuming from $r/checkpoints/prune/step-00000006.h5"
  expect_in gch-resumed out "prune: step 12: "
  expect_in gch-resumed out "groups pruned"
  $py - "$r/report.json" <<'EOF' || fail "gch-resumed: MACs not halved"
import json, sys
m = {x["name"]: x for x in json.load(open(sys.argv[1]))["models"]}
assert m["student (pruned)"]["macs"] <= 0.5 * m["student (distilled)"]["macs"], m
EOF
  # [quantize] after [prune]: QAT from PTQ's scales (calibrated once) under distillation; the report gets the
  # INT8 row (scored on the file by our INT8 runtime and by ONNX Runtime); the file passes
  # TensorRT's rules; stopped and resumed, it writes the same file byte for byte
  cp "$work/pipe_pr.toml" "$work/pipe_q.toml"
  printf '\n[quantize]\nmethod = "qat"\ncalibration_batches = 4\nepochs = 1\nlr = 0.005\nmomentum = 0.9\n' \
    >>"$work/pipe_q.toml"
  run 0 quantize pipeline "$work/pipe_q.toml" --out "$r"
  expect_in quantize out "SQNR"
  expect_in quantize out "quantize: 24 steps"
  [[ $(grep -c "^SQNR of each" "$work/quantize.out") == 1 ]] ||
    fail "quantize: the stage calibrated more than once"
  expect_in quantize out "quantize: PTQ, before QAT: validation top-1"
  grep -q "Stage quantize, PTQ, before QAT: top-1 [0-9.]*%" "$r/report.md" ||
    fail "quantize: the report's note on PTQ"
  grep -q "ONNX Runtime runs [0-9]* of its convolutions in float" "$r/report.md" ||
    fail "quantize: the report's note on ONNX Runtime's float convolutions"
  $py "$here/check_report.py" "$r" --models \
    "teacher,student (scratch),student (distilled),student (pruned),student (INT8)" \
    >/dev/null || fail "quantize: the report"
  $py "$here/check_qdq_trt.py" "$r/student_int8.onnx" >/dev/null || fail "quantize: TensorRT's rules"
  cp "$r/student_int8.onnx" "$work/int8_whole.onnx"
  run 1 quantize-stopped pipeline "$work/pipe_q.toml" --out "$r" --only quantize --stop-after 10
  run 0 quantize-resumed pipeline "$work/pipe_q.toml" --out "$r"
  expect_in quantize-resumed out "quantize: resuming from $r/checkpoints/quantize/step-00000010.h5"
  cmp -s "$r/student_int8.onnx" "$work/int8_whole.onnx" ||
    fail "quantize-resumed: student_int8.onnx differs from the uninterrupted run's"
  # PTQ: calibration only, no training keys; the same row and rules
  cp "$work/pipe_pr.toml" "$work/pipe_ptq.toml"
  printf '\n[quantize]\ncalibration_batches = 4\nreduce_range = true\n' >>"$work/pipe_ptq.toml"
  run 0 ptq pipeline "$work/pipe_ptq.toml" --out "$r" --only quantize
  expect_in ptq out "quantize: exporting"
  $py - "$r/report.json" <<'EOF' || fail "ptq: the report's INT8 row"
import json, sys
m = {x["name"]: x for x in json.load(open(sys.argv[1]))["models"]}["student (INT8)"]
assert not m["errors"] and m["train_seconds"] is None, m
assert 0 < m["top1"] <= 100 and 0 < m["onnx_bytes"] and m["cpu_ms_batch32"] > 0, m
assert m["ort_top1"] is None or abs(m["ort_top1"] - m["top1"]) <= 3, m
EOF
  $py "$here/check_qdq_trt.py" "$r/student_int8.onnx" >/dev/null || fail "ptq: TensorRT's rules"
  # Taylor importance: the scoring pass on the stage's data before the channels are chosen is
  # deterministic, so a resumed stage rebuilds the same graph and ends byte for byte the same
  sed -e 's/^sparsity = 0.5/sparsity = 0.5\nimportance = "taylor"\ntaylor_batches = 3/' \
    "$work/pipe_pr.toml" >"$work/pipe_tay.toml"
  run 0 taylor pipeline "$work/pipe_tay.toml" --out "$r" --only prune
  expect_in taylor out "prune: Taylor scores from 3 batches"
  cp "$r/student_pruned.onnx" "$work/taylor_whole.onnx"
  cmp -s "$r/student_pruned.onnx" "$work/pruned_whole.onnx" &&
    fail "taylor: the same file as L1 importance's"
  run 1 taylor-stopped pipeline "$work/pipe_tay.toml" --out "$r" --only prune --stop-after 10
  run 0 taylor-resumed pipeline "$work/pipe_tay.toml" --out "$r"
  cmp -s "$r/student_pruned.onnx" "$work/taylor_whole.onnx" ||
    fail "taylor-resumed: student_pruned.onnx differs from the uninterrupted run's"
  # [teacher] precision = "int8": the distillation reruns (another hash) from the teacher
  # quantized by PTQ, computing its outputs (another teacher, another cache key); the stages
  # before it stay complete and no temporary file is left behind
  sed 's/^spec = "resnet20.*"$/&\nprecision = "int8"/' "$work/pipe_kd.toml" >"$work/pipe_kd8.toml"
  run 0 kd-int8 pipeline "$work/pipe_kd8.toml" --out "$r" --only distill
  expect_in kd-int8 out "distill: the teacher runs in INT8 (PTQ, "
  expect_in kd-int8 out "distill: 48 steps"
  expect_in kd-int8 out "distill: teacher outputs of 48 batches computed, 0 read from the cache"
  ls "$r"/.teacher_int8.* >/dev/null 2>&1 && fail "kd-int8: a temporary teacher file was left"
else
  [[ $kd == 1 ]] || fail "kd: exit $kd"
  expect_in kd err "compress pipeline: $work/pipe_kd.toml:39:1: 'distill': knowledge distillation is not available"
  [[ ! -e $r/student.onnx ]] || fail "kd: a student.onnx without distillation"
  echo "ok   kd (not built in: refused)"
fi

run 2 bad-stage-arg pipeline "$work/pipe.toml" --only teacher --from scratch
run 1 no-such-stage pipeline "$work/pipe.toml" --only distill
expect_in no-such-stage err "no stage 'distill'"

# ---- bad files ----
config_error unknown-key 's/^epochs = 1/epoch = 1/' "21:1" "did you mean 'epochs'"
config_error missing-data 's/^train = "train.h5"/train = "nope.h5"/' "8:1" "nope.h5"
config_error classes 's/resnet20:classes=10/resnet20:classes=5/' "18:8" \
  "the model has 5 classes (its logits), but"
config_error precision 's/^threads = 1/precision = "int8"/' "5:13" 'one of "fp32", "bf16", "fp16"'
# [teacher] precision: the teacher's forward pass when distilled from; a CPU has no fp16
config_error teacher-precision 's/^spec = "resnet20.*"$/&\nprecision = "fp8"/' "19:13" \
  'one of "fp32", "bf16", "fp16", "int8"'
config_error teacher-fp16 's/^spec = "resnet20.*"$/&\nprecision = "fp16"/' "19:13" \
  "fp16 needs a CUDA device"
config_error precision-fp16 's/^threads = 1/precision = "fp16"/' "5:13" 'fp16 needs a CUDA device'
config_error device-cuda 's/^threads = 1/device = "cuda"/' "5:10" 'use "cpu" or "auto"'
config_error device-tpu 's/^threads = 1/device = "tpu"/' "5:10" 'one of "cpu", "cuda", "auto"'
config_error threads-word 's/^threads = 1/threads = "all"/' "5:11" 'give a count (0 to 1024) or "auto"'
printf '\n[quantize]\nepochs = 1\n' >>"$work/pipe.toml"
config_error quantize 's/^#.*//' "40:10" "'epochs' is a training key, and method = \"ptq\" does not train"
if ! "$compress" pipeline --help | grep -q "distill"; then fail "help: no distill stage"; fi

[[ $fails == 0 ]] && echo "all pipeline checks passed"
exit $((fails > 0))
