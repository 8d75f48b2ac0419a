"""Checks grouped by area; each module registers its checks on import (see registry.py)."""
