#!/usr/bin/env bash
# Data parallelism across two hosts (docs/distributed.md, "Several machines"), made on this one:
# two network namespaces joined by a veth pair, each its own host with its own address, and
# OpenMPI's TCP transport between them (no shared memory: the ranks see different hosts).
# mpirun runs in the first namespace and starts the second rank through an rsh agent that enters
# the second namespace (`ip netns exec`), as ssh would enter another machine.
#   - compress train, ResNet-20 on 1200 Fashion-MNIST images at 14x14, sync_bn, 6 steps: the
#     losses are those of the same 2-rank run on one host, to the last digit printed;
#   - the namespaces and the veth pair are gone afterwards.
# Skipped (77) without mpirun, or where this user cannot make network namespaces (not root, a
# container without CAP_SYS_ADMIN).
#
# usage: test_ddp_netns.sh COMPRESS MPIEXEC
set -u
compress=$(realpath "$1")
mpiexec=${2:-mpiexec}
command -v "$mpiexec" >/dev/null || { echo "skipped: no $mpiexec"; exit 77; }
command -v ip >/dev/null || { echo "skipped: no ip (iproute2)"; exit 77; }
work=$(mktemp -d)
ns_a=cx$$a ns_b=cx$$b
cleanup() {
  ip netns del "$ns_a" 2>/dev/null
  ip netns del "$ns_b" 2>/dev/null # the veth pair goes with its namespaces
  rm -rf "$work"
}
trap cleanup EXIT
cd /
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fails=0

source "$(dirname "$(realpath "${BASH_SOURCE[0]}")")/cli_lib.sh" || { echo "FAIL: tests/cli_lib.sh did not load"; exit 1; }

# ---- the two hosts ----
net=10.254.117
if ! ip netns add "$ns_a" 2>"$work/netns.err"; then
  echo "skipped: cannot make a network namespace: $(cat "$work/netns.err")"
  exit 77
fi
ip netns add "$ns_b" &&
  ip link add "v$$a" type veth peer name "v$$b" &&
  ip link set "v$$a" netns "$ns_a" && ip link set "v$$b" netns "$ns_b" &&
  ip -n "$ns_a" addr add "$net.1/24" dev "v$$a" && ip -n "$ns_b" addr add "$net.2/24" dev "v$$b" &&
  ip -n "$ns_a" link set "v$$a" up && ip -n "$ns_b" link set "v$$b" up &&
  ip -n "$ns_a" link set lo up && ip -n "$ns_b" link set lo up ||
  { echo "FAIL: could not join the namespaces with a veth pair"; exit 1; }
echo "ok   hosts $net.1 ($ns_a) and $net.2 ($ns_b)"

# OpenMPI's rsh agent: AGENT HOST COMMAND... runs COMMAND in HOST's namespace
cat >"$work/agent.sh" <<EOF
#!/bin/sh
host=\$1
shift
case \$host in
  $net.1) ns=$ns_a ;;
  $net.2) ns=$ns_b ;;
  *) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec \$ns sh -c "\$*"
EOF
chmod +x "$work/agent.sh"
printf '%s.1 slots=1\n%s.2 slots=1\n' "$net" "$net" >"$work/hosts"

fmnist_slice 14
cat >"$work/train.toml" <<'EOF'
[model]
spec = "resnet20:classes=10,input=1x14x14"

[data]
train = "train.h5"
val = "test.h5"
batch = 96
workers = 1
mean = [0.286]
std = [0.353]

[train]
epochs = 1
optimizer = "sgd"
lr = 0.1
momentum = 0.9
seed = 3
sync_bn = true
log_every = 1

[run]
threads = 1
EOF

# mpi_run NAME ARGS...: mpirun ARGS, expected to succeed
mpi_run() {
  local name=$1
  shift
  timeout 300 "$@" >"$work/$name.out" 2>"$work/$name.err"
  local got=$?
  if [[ $got != 0 ]]; then
    fail "$name: exited $got"
    tail -20 "$work/$name.err" | sed 's/^/    /'
  else
    echo "ok   $name (exit 0)"
  fi
}

# each rank on its own host: rank r sees only the address $net.(r+1)
mpi_run where ip netns exec "$ns_a" "$mpiexec" --hostfile "$work/hosts" -np 2 \
  --mca plm_rsh_agent "$work/agent.sh" --mca oob_tcp_if_include "$net.0/24" \
  sh -c 'echo "rank $OMPI_COMM_WORLD_RANK: $(ip -br addr | grep -o "'"$net"'\.[0-9]*")"'
for r in 0 1; do
  expect_in where out "rank $r: $net.$((r + 1))"
done

train=("$compress" train "$work/train.toml" --stop-after 6 --json)
mpi_run one-host "$mpiexec" --oversubscribe -np 2 "${train[@]}" --out "$work/one"
mpi_run two-hosts ip netns exec "$ns_a" "$mpiexec" --hostfile "$work/hosts" -np 2 \
  --mca plm_rsh_agent "$work/agent.sh" --mca btl tcp,self \
  --mca btl_tcp_if_include "$net.0/24" --mca oob_tcp_if_include "$net.0/24" \
  -x OMP_NUM_THREADS "${train[@]}" --out "$work/two"
expect_in two-hosts out '"ranks":2'
expect_in two-hosts out '"sync_bn":true'
losses() { grep -o '"loss":[^,]*' "$1/metrics.jsonl"; }
n=$(losses "$work/two" | wc -l)
[[ $n == 6 ]] || fail "two-hosts: $n losses in metrics.jsonl, expected 6"
if diff <(losses "$work/one") <(losses "$work/two") >"$work/diff"; then
  echo "ok   the same $n losses on one host and on two: $(losses "$work/two" | tail -1)"
else
  fail "two-hosts: the losses differ from one host's:"
  sed 's/^/    /' "$work/diff"
fi

cleanup
trap - EXIT
ip netns list | grep -q "^cx$$" && fail "the namespaces are still there"
ip link show "v$$a" >/dev/null 2>&1 && fail "the veth pair is still there"
echo "netns: $fails failure(s)"
[[ $fails == 0 ]]
