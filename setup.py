"""ament_python package set-up; the single place where Python dependencies are declared."""
from glob import glob

from setuptools import find_packages, setup

PACKAGE = 'alpamayo_offload'

# ROS 2 Jazzy from PyPI wheels, for pip-only installs (CI, replay machines). A ROS install
# provides these through rosdep instead, so they are an extra, not a hard requirement.
ROS_PIP = [
    'ros-jazzy-rclpy[fastrtps]',
    'ros-jazzy-sensor-msgs',
    'ros-jazzy-nav-msgs',
    'ros-jazzy-geometry-msgs',
    'ros-jazzy-std-msgs',
    'ros-jazzy-diagnostic-msgs',
]

setup(
    name=PACKAGE,
    version='0.1.0',
    packages=find_packages(exclude=['test', 'test.*', 'testkit', 'testkit.*', 'bench', 'bench.*']),
    package_data={PACKAGE: ['py.typed']},
    data_files=[
        ('share/ament_index/resource_index/packages', [f'resource/{PACKAGE}']),
        (f'share/{PACKAGE}', ['package.xml']),
        (f'share/{PACKAGE}/launch', glob('launch/*.launch.py')),
        (f'share/{PACKAGE}/config', glob('config/*.yaml') + glob('config/*.json')),
    ],
    python_requires='>=3.10',
    install_requires=[
        'setuptools',
        # 2.13.0 is the CPU build CI installs from disk; keep the range satisfied by it.
        'torch>=2.4,<3',
        # Qwen3-VL classes with the 5.x cache/rope API (architecture spec, section 6).
        'transformers>=5.0,<6',
        'safetensors>=0.4',
        'tokenizers>=0.20',
        'numpy>=1.24',
        'pillow>=10',
        # image conversion where cv_bridge is not importable (its OpenCV codes, encodings.py)
        'opencv-python-headless>=4.6',
        'pyyaml>=6',
        'rosbags>=0.10',
        # Reads mcap files a killed recorder left without summary/footer (replay recovery).
        'mcap>=1.1',
        'tqdm>=4.60',
        'matplotlib>=3.7',
    ],
    extras_require={
        'ros-pip': ROS_PIP,
        # pytest 9 removed the `path` argument of `pytest_pycollect_makemodule`, which the
        # launch_testing pytest plugin released for Humble and Jazzy still implements: with
        # pytest 9, `colcon test` (plugin loaded from the sourced ROS install) stops at collection.
        'test': ['pytest>=7,<9', 'ruff>=0.5', 'colcon-common-extensions>=0.3'],
        # `alpamayo-offload replay --ray`: samples sharded over a Ray cluster.
        'ray': ['ray>=2.9'],
        # Lossless compressed streaming on CUDA (runtime/codec.py: nvCOMP ANS); CUDA 13 builds.
        'nvcomp': ['nvidia-nvcomp-cu13>=6.0'],
    },
    zip_safe=True,
    maintainer='alpamayo_offload maintainers',
    maintainer_email='alpamayo-offload@example.com',
    description='Bit-exact pipelined layer offloading for Alpamayo-R1 with a ROS 2 node.',
    license='Apache-2.0',
    entry_points={
        'console_scripts': [
            'alpamayo_offload_node = alpamayo_offload.ros.node_entry:main',
            'alpamayo-offload = alpamayo_offload.cli:main',
            'alpamayo_offload_replay = alpamayo_offload.cli:replay_main',
        ],
    },
)
