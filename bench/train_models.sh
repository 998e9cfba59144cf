# The training benchmarks' models (sourced by run_train.sh and run_bf16_gain.sh): name, compress
# spec, PyTorch model (bench/train_speed_torch.py): the Fashion-MNIST pair at 1x28x28, then the
# CIFAR-sized models of issue 17's table at 3x32x32.
# shellcheck disable=SC2034 # used by the scripts that source it
train_models=(
  "resnet20 resnet20:classes=10,input=1x28x28 resnet20"
  "mobilenet_v2_0.5 mobilenet_v2:width=0.5,classes=10,input=1x28x28 mobilenet_v2_0.5"
  "resnet20_32 resnet20:classes=10,input=3x32x32 resnet20_32"
  "resnet56_32 resnet56:classes=10,input=3x32x32 resnet56_32"
  "mobilenet_v2 mobilenet_v2:classes=10,input=3x32x32 mobilenet_v2"
  "mobilenet_v2_0.5_32 mobilenet_v2:width=0.5,classes=10,input=3x32x32 mobilenet_v2_0.5_32"
  "mnv3_small mobilenet_v3_small:classes=10,input=3x32x32 mobilenet_v3_small"
  "efficientnet_b0 efficientnet_b0:classes=10,input=3x32x32 efficientnet_b0"
)
