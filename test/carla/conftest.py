"""Lets the CARLA tests import the planted-engine double that lives next to them."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
