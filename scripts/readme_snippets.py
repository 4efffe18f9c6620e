#!/usr/bin/env python3
"""The README's code blocks, for the tests that compile and run them.

Convention: a fenced block's info string is "<language> [title=<path>] [norun]".
  title=<path>  the block is meant to run. If <path> is a file of this repository, the block must
                equal it (that file is built and run by its own test); otherwise a test extracts
                the block by its title and runs it, and must name the title in its source.
  norun         shown only (an output, a tree listing, a command that needs a GPU).
Every block in a language that can run (c, c++, cpp, cmake, sh, bash, python, rust, go) carries
one of the two.

  readme_snippets.py check [README.md]   checks the convention (a ctest)
  readme_snippets.py list [README.md]    prints each titled block's title
"""
import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
RUNNABLE = {"c", "c++", "cpp", "cmake", "sh", "bash", "python", "rust", "go"}
FENCE = re.compile(r"^(```+)(.*)$")
# Where tests that consume titled blocks live.
TEST_DIRS = ["tests", "bindings", "examples"]


class Block:
    def __init__(self, language, title, norun, code, line):
        self.language = language
        self.title = title
        self.norun = norun
        self.code = code
        self.line = line


def parse(text):
    """Fenced blocks of a Markdown text, in order."""
    blocks = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info = m.group(1), m.group(2).split()
        language = info[0].lower() if info else ""
        title = None
        norun = False
        for word in info[1:]:
            if word.startswith("title="):
                title = word[len("title="):]
            elif word == "norun":
                norun = True
        start = i + 1
        i = start
        while i < len(lines) and not lines[i].startswith(fence):
            i += 1
        blocks.append(Block(language, title, norun, "\n".join(lines[start:i]) + "\n", start))
        i += 1
    return blocks


def load(readme=None):
    path = readme or os.path.join(ROOT, "README.md")
    with open(path, encoding="utf-8") as f:
        return parse(f.read())


def titled(readme=None):
    """{title: code} of every block meant to run."""
    return {b.title: b.code for b in load(readme) if b.title}


def consumers_text():
    text = []
    for top in TEST_DIRS:
        for dirpath, dirs, names in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if d not in ("target", "__pycache__")]
            for name in names:
                if name.endswith((".py", ".sh", ".txt", ".cmake", ".rs", ".go", ".cpp", ".c")):
                    try:
                        with open(os.path.join(dirpath, name), encoding="utf-8") as f:
                            text.append(f.read())
                    except (OSError, UnicodeDecodeError):
                        pass
    return "\n".join(text)


def check(readme=None):
    problems = []
    blocks = load(readme)
    consumers = None
    seen = set()
    for b in blocks:
        where = f"README.md:{b.line}"
        if b.title and b.norun:
            problems.append(f"{where}: a block is either title= (runs) or norun (shown), not both")
        if b.language in RUNNABLE and not b.title and not b.norun:
            problems.append(f"{where}: ```{b.language} block without title= or norun")
        if not b.title:
            continue
        if b.title in seen:
            problems.append(f"{where}: title {b.title} used twice")
        seen.add(b.title)
        repo_file = os.path.join(ROOT, b.title)
        if os.path.isfile(repo_file):
            with open(repo_file, encoding="utf-8") as f:
                if f.read() != b.code:
                    problems.append(f"{where}: block differs from {b.title}; copy one onto the other")
        else:
            if consumers is None:
                consumers = consumers_text()
            if b.title not in consumers:
                problems.append(f"{where}: no test under {', '.join(TEST_DIRS)} names {b.title}")
    return problems


def main(argv):
    if len(argv) < 2 or argv[1] not in ("check", "list"):
        print(__doc__)
        return 2
    readme = argv[2] if len(argv) > 2 else None
    if argv[1] == "list":
        for title in titled(readme):
            print(title)
        return 0
    problems = check(readme)
    for p in problems:
        print(p)
    print(f"README snippets: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
