#!/usr/bin/env python3
"""The README's code blocks (scripts/readme_snippets.py): the convention holds, every block that
mirrors a repository file equals it, and the Python block (readme/decode.py) runs against the
library given by --library. The C, CMake and shell blocks are run by install_test.py."""
import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import readme_snippets  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", required=True, help="libdsv4.so.0 for the Python block")
    args = parser.parse_args()
    failures = readme_snippets.check(REPO / "README.md")
    for problem in failures:
        print(f"FAIL: {problem}")
    snippets = readme_snippets.titled(REPO / "README.md")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSV4_")}
    env.update(DSV4_LIBRARY=args.library, PYTHONPATH=str(REPO / "bindings" / "python"),
               PYTHONDONTWRITEBYTECODE="1")
    title = "readme/decode.py"
    with tempfile.TemporaryDirectory() as scratch:
        script = Path(scratch) / "decode.py"
        script.write_text(snippets[title])
        p = subprocess.run([sys.executable, str(script)], cwd=scratch, env=env,
                           capture_output=True, text=True)
    print(p.stdout + p.stderr)
    if p.returncode != 0:
        failures.append(title)
        print(f"FAIL: {title} exited with {p.returncode}")
    print(f"README snippets: {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
