#!/bin/sh
# Fetch the ROS 2 Jazzy wheels `bench/ros_wheels.sh` installs on the GPU machine (CPython 3.12,
# manylinux x86_64) into .whl_ros/ (ignored); run from the repository root where PyPI is
# reachable. empy is an sdist on PyPI, so its wheel is built here. numpy, PyYAML and setuptools
# are dropped: the GPU machine's python3 has them.
set -e
PIP="${PIP:-python3 -m pip}"
mkdir -p .whl_ros
$PIP wheel --no-deps -w .whl_ros empy==4.2.1
$PIP download --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 --find-links .whl_ros -d .whl_ros \
    'ros-jazzy-rclpy[fastrtps]==7.1.6' ros-jazzy-sensor-msgs==5.3.6 ros-jazzy-nav-msgs==5.3.6 \
    ros-jazzy-geometry-msgs==5.3.6 ros-jazzy-std-msgs==5.3.6 ros-jazzy-diagnostic-msgs==5.3.6 \
    ros-lifecycle-msgs==2.0.3
rm -f .whl_ros/numpy-*.whl .whl_ros/pyyaml-*.whl .whl_ros/setuptools-*.whl
du -sh .whl_ros
