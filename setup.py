"""Build the optional compiled fast path; everything else is in pyproject.toml.

When the C compiler is missing or fails, the install still succeeds (pure Python, about 3-10x
slower to decode) and says so loudly; `kprotocol.runtime.accel.ENABLED` tells at run time.
"""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001 - any compiler failure leaves the pure-Python path
            message = (f"WARNING: kprotocol's compiled fast path ({ext.name}) could not be built ({exc}); "
                       "kprotocol will run in pure Python.")
            print("*" * len(message) + "\n" + message + "\n" + "*" * len(message))
            self.warn(message)


setup(
    ext_modules=[Extension("kprotocol._speedups", ["kprotocol/_speedups.c"], extra_compile_args=["-O2"]),
                 Extension("kprotocol.capture._walk", ["kprotocol/capture/_walk.c"], extra_compile_args=["-O2"]),
                 Extension("kprotocol.coordinator_topics._offsets", ["kprotocol/coordinator_topics/_offsets.c"],
                           extra_compile_args=["-O2"])],
    cmdclass={"build_ext": OptionalBuildExt},
)
