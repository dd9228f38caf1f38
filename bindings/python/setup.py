"""Build hook: everything else is in pyproject.toml.

A wheel that carries libasp.so.0 (`make python-wheel` puts a copy in asp/)
holds machine code: it is tagged py3-none-<platform> (any Python 3, this
platform), not py3-none-any. Without the copy the package is pure Python
and uses the system's libasp.
"""

import os

from setuptools import Distribution, setup

try:
    from wheel.bdist_wheel import bdist_wheel
except ImportError:  # no wheel module: pip builds no wheel through this file then
    bdist_wheel = None

BUNDLED = os.path.exists(os.path.join(os.path.dirname(os.path.abspath(__file__)), "asp", "libasp.so.0"))


class BinaryDistribution(Distribution):
    """Platform-specific files: installed to platlib, the wheel is not pure."""

    def has_ext_modules(self):
        return True


options = {}
if bdist_wheel is not None and BUNDLED:
    class platform_wheel(bdist_wheel):
        def get_tag(self):
            _, _, plat = super().get_tag()
            return "py3", "none", plat

    options = {"distclass": BinaryDistribution, "cmdclass": {"bdist_wheel": platform_wheel}}

setup(**options)
