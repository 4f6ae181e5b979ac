"""The repository's own docs (part of `make check`): they stand on their own, and what the
guarantees page says about tests is true of the tests that exist."""
import ast
import os
import re
import subprocess

from helpers import ROOT

GUARANTEES = os.path.join(ROOT, "docs", "guarantees.md")


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def python_tests():
    """{file name: set of test function names} for every tests/test_*.py, read by ast."""
    found = {}
    tests = os.path.join(ROOT, "tests")
    for name in sorted(os.listdir(tests)):
        if name.startswith("test_") and name.endswith(".py"):
            tree = ast.parse(read(os.path.join(tests, name)))
            found[name] = {n.name for n in ast.walk(tree)
                           if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("test_")}
    return found


# `tests/test_x.py`, `test_x.py::test_NAME_*`, `src/time.rs`
CITED_TEST = re.compile(r"(?:tests/)?(test_\w+\.py)(?:::(test_\w+?)(\*)?)?(?![\w*])")
CITED_RUST = re.compile(r"`(src/[\w/]+\.rs)` tests")


def test_every_test_the_guarantees_page_cites_exists():
    page = read(GUARANTEES)
    tests = python_tests()
    cited = CITED_TEST.findall(page)
    assert len(cited) > 20, cited
    missing = []
    for file, name, star in cited:
        if file not in tests:
            missing.append(file)
        elif name and not any(t == name or (star and t.startswith(name)) for t in tests[file]):
            missing.append(f"{file}::{name}{star}")
    for path in CITED_RUST.findall(page):
        text = read(os.path.join(ROOT, path)) if os.path.exists(os.path.join(ROOT, path)) else ""
        if "#[test]" not in text:
            missing.append(f"{path} (with Rust tests)")
    assert not missing, f"docs/guarantees.md cites tests that do not exist: {missing}"


def test_every_rule_on_the_guarantees_page_has_tests_named_after_it():
    page = read(GUARANTEES)
    rules_part = page.split("## The rules", 1)[1].split("\n## ", 1)[0]
    rules = re.findall(r"^- \*\*([A-Z]+-\d+)\b", rules_part, re.M)
    assert len(rules) >= 19, rules
    names = set().union(*python_tests().values())
    untested = [r for r in rules if not any(n.startswith("test_" + r.replace("-", "_") + "_") for n in names)]
    assert not untested, f"rules without a test named after them: {untested}"
    # and the table of how each holds has a row for each rule
    table = page.split("## How each holds", 1)[1]
    assert [r for r in rules if f"| {r} " not in table] == []


def test_no_count_is_written_by_hand():
    """Counts of tests or cases drift as tests are added: the docs say what, not how many."""
    for path in tracked(".md"):
        for n, line in enumerate(read(os.path.join(ROOT, path)).splitlines(), 1):
            assert not re.search(r"\b\d+ (test )?(cases|tests)\b", line), f"{path}:{n}: {line}"


def tracked(suffix=""):
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [p for p in out.splitlines() if p.endswith(suffix) and os.path.isfile(os.path.join(ROOT, p))]


OUTSIDE = re.compile(r"\.\./shared|\bSPEC(\.md|'s| section)|FIELD-NOTES|(?<![\w/.])/work/")


def test_nothing_in_the_repository_refers_to_a_path_outside_it():
    hits = []
    for path in tracked():
        try:
            text = read(os.path.join(ROOT, path))
        except (UnicodeDecodeError, IsADirectoryError):
            continue  # binary (images)
        for n, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line) and path != "tests/test_docs.py":
                hits.append(f"{path}:{n}: {line.strip()}")
    assert not hits, "\n".join(hits)


def test_every_relative_link_in_the_docs_stays_inside_the_repository_and_exists():
    bad = []
    for path in tracked(".md"):
        here = os.path.dirname(os.path.join(ROOT, path))
        for target in re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", read(os.path.join(ROOT, path))):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            full = os.path.realpath(os.path.join(here, target))
            if not full.startswith(ROOT + os.sep) or not os.path.exists(full):
                bad.append(f"{path}: {target}")
    assert not bad, bad
