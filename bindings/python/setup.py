"""Build hook of pyproject.toml: when DSV4_LIBRARY names the library while the package is built
(pip install), the built package records that path in dsv4/_paths.py as its default library, so
that it needs no environment variable later (DSV4_LIBRARY at run time still comes first)."""
import os

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyRecordingLibrary(build_py):
    def run(self):
        super().run()
        library = os.environ.get("DSV4_LIBRARY")
        if library:
            target = os.path.join(self.build_lib, "dsv4", "_paths.py")
            with open(target, "w") as out:
                out.write("# Written by pip install (DSV4_LIBRARY at install time).\n"
                          "LIBRARY = %r\n" % os.path.abspath(library))


setup(cmdclass={"build_py": BuildPyRecordingLibrary})
