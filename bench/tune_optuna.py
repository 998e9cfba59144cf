"""compress tune against Optuna, issue 20's acceptance on a Fashion-MNIST slice: 16 TPE trials
over distill lr, temperature and alpha, `compress tune` against Optuna's TPESampler (defaults)
whose objective runs our binary on the same pipeline (same space, same 16 trials, the teacher of
our first trial linked in the same way compress tune shares it), the median best validation
top-1 over 3 seeds; then the hand-set keys (lr 0.05, T 4, alpha 0.9) once.

    python3 -m venv V && V/bin/pip install optuna
    V/bin/python bench/tune_optuna.py build/compress WORK DATA

DATA holds train.h5 and test.h5 at 16x16 (tests/cli_lib.sh's fmnist_slice 16 makes them: 1200
and 500 images); WORK gets each tune and study. Trials run one at a time, single-threaded, with
ONNX Runtime left out of their reports (CX_PYTHON=/nonexistent). About 3-6 s a trial on this
machine's cores (2026-12-05), 100 trials in all. docs/tune.md has the figures.
"""
import json, os, statistics, subprocess, sys, time
import optuna

compress = sys.argv[1]
work = os.path.abspath(sys.argv[2])
data = os.path.abspath(sys.argv[3])  # folder with train.h5, test.h5
seeds = [1, 2, 3]
env = dict(os.environ, OMP_NUM_THREADS="1", CX_PYTHON="/nonexistent")

BASE = f"""[run]
out_dir = "{{out}}"
seed = 3
threads = 1

[data]
train = "{data}/train.h5"
val = "{data}/test.h5"
batch = 50
mean = [0.286]
std = [0.353]

[teacher]
spec = "resnet20:classes=10,input=1x16x16"

[teacher.train]
epochs = 3
lr = 0.1
momentum = 0.9

[student]
spec = "resnet20:classes=10,input=1x16x16,seed=7"

[distill]
epochs = 2
momentum = 0.9
{{keys}}
"""
SPACE = """
[tune]
trials = 16
sampler = "tpe"
seed = {seed}
"distill.lr" = {{log = [1e-3, 0.3]}}
"distill.temperature" = [1.0, 8.0]
"distill.alpha" = [0.1, 0.99]
"""

def top1(out):
    for line in open(f"{out}/stages/distill.done"):
        if line.startswith("val_top1 "):
            return float(line.split()[1])

def link_teacher(src, dst):
    os.makedirs(f"{dst}/stages", exist_ok=True)
    os.symlink(os.path.realpath(f"{src}/teacher.onnx"), f"{dst}/teacher.onnx")
    os.symlink(os.path.realpath(f"{src}/teacher_cache"), f"{dst}/teacher_cache")
    open(f"{dst}/stages/teacher.done", "w").write(open(f"{src}/stages/teacher.done").read())

def run_pipeline(out, keys, teacher_from):
    os.makedirs(out, exist_ok=True)
    link_teacher(teacher_from, out)
    path = f"{out}.toml"
    open(path, "w").write(BASE.format(out=out, keys=keys))
    log = open(f"{out}.log", "w")
    rc = subprocess.call([compress, "pipeline", path], stdout=log, stderr=subprocess.STDOUT, env=env)
    assert "teacher: complete" in open(f"{out}.log").read(), out  # the same teacher hash
    return top1(out) if rc == 0 else float("nan")

ours, theirs, times = {}, {}, {}
for s in seeds:
    d = f"{work}/ours{s}"
    open(f"{d}.toml", "w").write(BASE.format(out=d, keys="") + SPACE.format(seed=s))
    t0 = time.time()
    subprocess.check_call([compress, "tune", f"{d}.toml"], stdout=open(f"{d}.log", "w"), env=env)
    times[f"ours{s}"] = time.time() - t0
    lines = [json.loads(l) for l in open(f"{d}/trials.jsonl")]
    ours[s] = max(l["value"] for l in lines if l["status"] == "complete")
    teacher = f"{d}/trials/0001"

    def objective(trial):
        keys = (f"lr = {trial.suggest_float('lr', 1e-3, 0.3, log=True)!r}\n"
                f"temperature = {trial.suggest_float('temperature', 1.0, 8.0)!r}\n"
                f"alpha = {trial.suggest_float('alpha', 0.1, 0.99)!r}\n")
        return run_pipeline(f"{work}/optuna{s}/{trial.number:04d}", keys, teacher)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=s))
    t0 = time.time()
    study.optimize(objective, n_trials=16)
    times[f"optuna{s}"] = time.time() - t0
    theirs[s] = study.best_value
    print(f"seed {s}: compress tune best {ours[s]:.1f}, Optuna best {theirs[s]:.1f} "
          f"({times[f'ours{s}']:.0f} s, {times[f'optuna{s}']:.0f} s)", flush=True)

hand = run_pipeline(f"{work}/handset", "lr = 0.05\ntemperature = 4.0\nalpha = 0.9\n",
                    f"{work}/ours1/trials/0001")
print(f"median best top-1 over seeds {seeds}: compress tune {statistics.median(ours.values()):.1f}, "
      f"Optuna {statistics.median(theirs.values()):.1f}; hand-set (lr 0.05, T 4, alpha 0.9) {hand:.1f}")
