"""alpamayo_offload: Alpamayo-R1-10B within a small VRAM budget, bit-exact, as a ROS 2 package."""

__version__ = '0.1.0'
