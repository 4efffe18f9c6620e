#!/usr/bin/env python3
"""The `dsv4` tool as people use it: common options before or after the command, --json for
scripts, progress on stderr (a live line on a terminal, plain lines when piped), each error said
once, usage errors with exit status 2.

  cli_test.py <path of the dsv4 binary>
"""
import json
import os
import pty
import re
import select
import subprocess
import sys
import unittest

DSV4 = None
PROGRESS_LINE = re.compile(r"^\[\s*\d+\.\d s\] flash (swa|c4a|c128a): ")


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSV4_")}
    env.update(extra)
    return env


def run(*args, env=None, cwd=None):
    return subprocess.run([DSV4, *args], capture_output=True, text=True, env=env or clean_env(),
                          cwd=cwd, timeout=300)


class CommonOptions(unittest.TestCase):
    def test_before_and_after_the_command(self):
        for args in (["--device", "cpu", "info"], ["info", "--device", "cpu"],
                     ["--device=cpu", "--backend", "cpu", "info"]):
            p = run(*args)
            self.assertEqual(p.returncode, 0, f"{args}: {p.stderr}")
            self.assertIn("selected: cpu", p.stdout, args)

    def test_relative_module_dir_is_taken_from_the_current_directory(self):
        lib = os.path.dirname(os.path.dirname(os.path.realpath(DSV4)))
        backends = os.path.join(lib, "lib", "dsv4", "backends")
        p = run("--json", "--module-dir", os.path.relpath(backends, lib), "info", cwd=lib)
        self.assertEqual(p.returncode, 0, p.stderr)
        selected = json.loads(p.stdout)["selection"]["selected"]
        self.assertTrue(selected["path"].startswith(os.path.realpath(backends) + "/"), selected)

    def test_help_and_version(self):
        for args in (["--help"], ["help"], ["help", "run"], ["run", "--help"], ["info", "-h"],
                     ["--version"], ["version"]):
            p = run(*args)
            self.assertEqual(p.returncode, 0, f"{args}: {p.stderr}")
            self.assertEqual(p.stderr, "", args)
        self.assertIn("--check-tokens", run("help", "run").stdout)
        doc = json.loads(run("--json", "version").stdout)
        self.assertRegex(doc["version"], r"^\d+\.\d+\.\d+$")


class Json(unittest.TestCase):
    def test_info(self):
        p = run("--json", "info")
        self.assertEqual(p.returncode, 0, p.stderr)
        doc = json.loads(p.stdout)
        names = [m["name"] for m in doc["modules"] if m["available"]]
        self.assertIn("cpu", names)
        self.assertEqual(doc["selection"]["selected"]["name"], "cpu")
        self.assertIsNone(doc["selection"]["error"])
        self.assertTrue(any(d["device"] == "cpu:0" for d in doc["devices"]))

    def test_info_without_a_backend_is_a_document_and_status_1(self):
        p = run("--json", "--backend", "nope", "info")
        self.assertEqual(p.returncode, 1)
        doc = json.loads(p.stdout)
        self.assertIsNone(doc["selection"]["selected"])
        self.assertIn("'nope'", doc["selection"]["error"])

    def test_failure_is_a_document_too(self):
        p = run("--json", "run", "--backend", "nope", "--quick")
        self.assertEqual(p.returncode, 1)
        doc = json.loads(p.stdout)
        self.assertFalse(doc["passed"])
        self.assertIn("options->backend = 'nope'", doc["error"])
        self.assertEqual(len(p.stderr.splitlines()), 1, p.stderr)

    def test_run(self):
        p = run("--json", "run", "--quick", "--config", "flash", "--seed", "7", "--no-progress")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stderr, "")
        doc = json.loads(p.stdout)  # stdout is the document and nothing else
        self.assertTrue(doc["passed"])
        self.assertEqual(doc["seed"], 7)
        layers = doc["configs"][0]["layers"]
        self.assertEqual([layer["layer"] for layer in layers], ["swa", "c4a", "c128a"])
        for layer in layers:
            self.assertTrue(layer["check"]["passed"], layer)
            self.assertGreater(layer["check"]["out_decode"]["elements"], 0)
            self.assertEqual(layer["check"]["lse"]["failures"], 0)


class Errors(unittest.TestCase):
    def test_library_error_is_said_once(self):
        p = run("run", "--backend", "nope", "--quick")
        self.assertEqual(p.returncode, 1)
        lines = p.stderr.splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertEqual(p.stderr.count("dsv4_ctx_create"), 1, p.stderr)
        self.assertIn("options->backend = 'nope'", lines[0])
        self.assertIn("[DSV4_STATUS_NO_BACKEND]", lines[0])

    def test_library_warning_is_said_once(self):
        # info makes several enumerations and a context; the loader warns in each of them.
        p = run("info", env=clean_env(DSV4_BACKEND_PATH="relative/dir"))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stderr.count("'relative/dir'"), 1, p.stderr)
        self.assertIn("not an absolute path", p.stderr)
        p = run("--json", "info", env=clean_env(DSV4_BACKEND_PATH="relative/dir"))
        self.assertEqual(len(json.loads(p.stdout)["warnings"]), 1)

    def test_usage_errors(self):
        cases = [
            (["run", "--tokens", "x"], "--tokens needs an integer"),
            (["run", "--tokens"], "needs a value"),
            (["run", "--config", "huge"], "expected flash, pro or both"),
            (["run", "--bogus"], "unknown option '--bogus'"),
            (["--bogus", "info"], "unknown option '--bogus'"),
            (["--device", "gpu", "info"], "expected cpu, cuda or cuda:N"),
            (["info", "extra"], "unexpected argument 'extra'"),
            (["frob"], "unknown command 'frob'"),
            (["--module-dir", "/nonexistent/dsv4", "info"], "--module-dir"),
        ]
        for args, message in cases:
            p = run(*args)
            self.assertEqual(p.returncode, 2, f"{args}: {p.stderr}")
            self.assertEqual(len(p.stderr.splitlines()), 1, f"{args}: {p.stderr}")
            self.assertIn(message, p.stderr, args)
            self.assertEqual(p.stdout, "", args)
        p = run()
        self.assertEqual(p.returncode, 2)
        self.assertIn("usage: dsv4", p.stderr)


class Progress(unittest.TestCase):
    def test_plain_lines_when_piped(self):
        p = run("run", "--quick", "--config", "flash")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("ALL CHECKS PASSED", p.stdout)
        lines = p.stderr.splitlines()
        self.assertNotIn("\r", p.stderr)
        self.assertGreaterEqual(len(lines), 9, p.stderr)  # three steps for each of three layers
        for line in lines:
            self.assertRegex(line, PROGRESS_LINE)
        p = run("run", "--quick", "--config", "flash", "--no-progress")
        self.assertEqual(p.returncode, 0)
        self.assertEqual(p.stderr, "")

    def test_live_line_on_a_terminal(self):
        master, slave = pty.openpty()
        try:
            proc = subprocess.Popen([DSV4, "run", "--quick", "--config", "flash"],
                                    stdout=subprocess.PIPE, stderr=slave, env=clean_env(),
                                    text=True)
            os.close(slave)
            slave = None
            terminal = b""
            while True:
                ready, _, _ = select.select([master], [], [], 300)
                if not ready:
                    break
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # the other end closed
                    break
                if not chunk:
                    break
                terminal += chunk
            out, _ = proc.communicate(timeout=300)
        finally:
            os.close(master)
            if slave is not None:
                os.close(slave)
        self.assertEqual(proc.returncode, 0)
        self.assertIn("ALL CHECKS PASSED", out)
        text = terminal.decode()
        self.assertIn("\r\x1b[K", text)  # the line is rewritten in place
        self.assertIn("flash c4a: ", text)
        self.assertNotIn("\n", text.replace("\r\n", ""), "a live line never ends a line")
        self.assertTrue(text.endswith("\r\x1b[K"), "the live line is erased at the end")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    DSV4 = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
