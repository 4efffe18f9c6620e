"""The package under test is an installed copy that found libdsv4 by itself (run_installed.py sets
DSV4_EXPECT_INSTALLED to the install prefix or venv; without it, e.g. a run from the source tree,
there is nothing to check)."""
import os
import unittest

import dsv4
from dsv4 import _lib


@unittest.skipUnless(os.environ.get("DSV4_EXPECT_INSTALLED"), "not an installed-copy run")
class InstalledTest(unittest.TestCase):
    def test_package_and_library_come_from_the_installation(self):
        root = os.path.realpath(os.environ["DSV4_EXPECT_INSTALLED"])
        package = os.path.realpath(os.path.dirname(dsv4.__file__))
        self.assertTrue(package.startswith(root + os.sep), (package, root))
        self.assertNotIn("DSV4_LIBRARY", os.environ)
        from dsv4 import _paths  # written at install time
        loaded = os.path.realpath(_lib.lib()._name)
        self.assertEqual(loaded, os.path.realpath(os.path.join(package, _paths.LIBRARY)))
        self.assertTrue(os.path.isfile(loaded))
        cpu = [b for b in dsv4.enumerate_backends() if b.name == "cpu"]
        self.assertTrue(cpu and cpu[0].available, "the CPU module beside the library")
