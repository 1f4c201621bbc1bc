"""Every use of a Lightning private attribute or method, in one place.

Lightning's public API does not (yet) offer these; each function names what it reaches and
why, and ``tests/test_lightning_compat.py`` has a test per function that fails loudly if a
Lightning release changes it. ``constraints.txt`` pins the Lightning version CI tests and
``pyproject.toml`` accepts only that minor release.
"""

from __future__ import annotations
