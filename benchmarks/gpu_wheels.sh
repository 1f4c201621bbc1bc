#!/usr/bin/env bash
# The packages td3_lightning needs beyond a GPU machine's image (which has torch, Lightning, numpy, PyYAML,
# tensorboard, torchmetrics, matplotlib): downloaded here as Python 3.12 manylinux wheels into .whl/ (in
# .gitignore: name it in the device call's carry). benchmarks/gpu_check.sh installs them when .whl/ is there.
#
#   bash benchmarks/gpu_wheels.sh      # here, once; then carry .whl to the GPU machine
set -eu
cd "$(dirname "$0")/.."
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl \
    gymnasium==1.4.0 farama-notifications==0.0.6 box2d==2.3.10 pygame-ce==2.5.8 \
    jsonargparse==4.53.0 docstring-parser==0.18.0 typeshed-client==2.15.0 \
    mujoco==4.0.0 mujoco-core==4.0.0 mujoco-studio==4.0.0 glfw==2.11.0 pyopengl==3.1.10
du -sh .whl
