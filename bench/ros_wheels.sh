# Source from the repository root on a machine without ROS or internet (the GPU machine):
#     . bench/ros_wheels.sh && "$ROS_PY" -m bench.bench_product ...
# Makes /tmp/rosenv, a virtual environment that sees python3's own packages (torch) through a
# .pth file, installs the ROS 2 Jazzy wheels of .whl_ros/ into it (rclpy, Fast DDS, the message
# packages the node uses; `bench/fetch_ros_wheels.sh` fetches them) and sets ROS_PY to its
# interpreter. The wheels install data files beside the interpreter's prefix (shared libraries
# under lib/, the ament index under share/), which `pip install --target` would drop, hence
# the environment. Wheels in .whl/ (rosbags and its codecs) go into the same environment.
ROS_ENV=${ROS_ENV:-/tmp/rosenv}
_base_site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
python3 -m venv --without-pip "$ROS_ENV" || return 1
_env_site=$("$ROS_ENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# addsitedir, not a bare path line: the base's own .pth files are processed too.
echo "import site; site.addsitedir('$_base_site')" > "$_env_site/_base_packages.pth"
for _dir in .whl_ros .whl; do
    if [ -d "$_dir" ]; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
            --prefix "$ROS_ENV" "$_dir"/*.whl || return 1
    fi
done
ROS_PY="$ROS_ENV/bin/python"
export ROS_PY PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
"$ROS_PY" -c 'import rclpy, rosbags; print("ROS ready:", rclpy.__file__)' || return 1
unset _base_site _env_site _dir
