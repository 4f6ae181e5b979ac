"""docs/reference.md is executable: every example runs, and every function is documented.

The reference is split into sections by its level-2 headings (`## tq_add`). In each
section, every ```sql block is followed by an ```output block holding exactly what the
sqlite3 shell prints for it in its default list mode. A section's blocks run in order, on
one connection, on a fresh database; each block is fed to the shell with `.read`, so an
error shows as `Runtime error near line N: ...` with N counted within its block.
"""
import os
import re
import sqlite3
import subprocess

import pytest

from helpers import EXT, ROOT

REFERENCE = os.path.join(ROOT, "docs", "reference.md")
DESIGN = os.path.join(ROOT, "docs", "design.md")
MARKER = "@@tinyq-reference-block-end@@"

DIRECTONLY = 0x80000
INNOCUOUS = 0x200000

# The exact scalar functions tinyq registers: (name, narg) -> flag.
# narg -1 means "any number of arguments; the function checks them".
SCALARS = {
    ("tq_add", -1): "trigger-callable",
    ("tq_cancel", -1): "trigger-callable",
    ("tq_signal", -1): "trigger-callable",
    ("tq_get", -1): "innocuous",
    ("tq_retry", -1): "directonly",
    ("tq_renew", -1): "directonly",
    ("tq_settle", -1): "directonly",
    ("tq_step_get", -1): "innocuous",
    ("tq_step_put", -1): "directonly",
    ("tq_progress", -1): "directonly",
    ("tq_wait", -1): "directonly",
    ("tq_wait_any", -1): "directonly",
    ("tq_schedule", -1): "directonly",
    ("tq_schedule_get", -1): "innocuous",
    ("tq_unschedule", -1): "directonly",
    ("tq_queue", 1): "innocuous",      # tq_queue(name): read
    ("tq_queue", 2): "directonly",     # tq_queue(name, options): set
    ("tq_queue", -1): "directonly",    # any other count: an error, never a read
    ("tq_sweep", -1): "directonly",
    ("tq_clock", -1): "directonly",
    ("tq_now", -1): "innocuous",
    ("tq_version", -1): "innocuous",
    ("tq_debug", -1): "innocuous",
    ("tq_check", -1): "directonly",
}
# The table-valued functions (eponymous virtual tables) and their flag.
TABLES = {
    "tq_claim": "directonly",
    "tq_watch": "innocuous",
    "tq_jobs": "innocuous",
    "tq_stats": "innocuous",
    "tq_schedules": "innocuous",
    "tq_steps": "innocuous",
    "tq_deps": "innocuous",
    "tq_statements": "innocuous",
}


# ---------------------------------------------------------------- parsing the reference

def read_reference():
    with open(REFERENCE, encoding="utf-8") as f:
        return f.read()


def sections(text):
    """[(title, body)] for every level-2 heading, outside code fences."""
    out, title, body, fence = [], None, [], False
    for line in text.split("\n"):
        if line.startswith("```"):
            fence = not fence
        if not fence and line.startswith("## "):
            if title is not None:
                out.append((title, "\n".join(body)))
            title, body = line[3:].strip(), []
        elif title is not None:
            body.append(line)
    if title is not None:
        out.append((title, "\n".join(body)))
    return out


FENCE = re.compile(r"^```(\w*)[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)


def examples(body):
    """[(sql, expected output)] of a section; an sql block must be followed by an output block."""
    blocks = [(m.group(1), m.group(2), m.start(), m.end()) for m in FENCE.finditer(body)]
    pairs, i = [], 0
    while i < len(blocks):
        lang, text, _, end = blocks[i]
        if lang == "sql":
            assert i + 1 < len(blocks) and blocks[i + 1][0] == "output", \
                f"an ```sql block is not followed by an ```output block:\n{text}"
            between = body[end:blocks[i + 1][2]]
            assert between.strip() == "", f"text between an sql block and its output: {between!r}"
            pairs.append((text, blocks[i + 1][1]))
            i += 2
        else:
            assert lang != "output", f"an ```output block without its ```sql block:\n{text}"
            i += 1
    return pairs


def section_flag(body):
    """The flag a section states, from its `**Flag:** ...` line."""
    m = re.search(r"^\*\*Flag:\*\*\s*([a-z-]+)", body, re.M)
    return m.group(1) if m else None


# ---------------------------------------------------------------- running examples

def run_section(tmp_path, blocks):
    """Runs the sql blocks in order in one sqlite3 shell on a fresh db; one output per block."""
    script = [f".load {EXT}"]
    for k, sql in enumerate(blocks):
        (tmp_path / f"block{k}.sql").write_text(sql, encoding="utf-8")
        script += [f".read block{k}.sql", f".print {MARKER}"]
    proc = subprocess.run(["sqlite3", str(tmp_path / "store.db")], input="\n".join(script) + "\n",
                          cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=120)
    parts = proc.stdout.split(MARKER + "\n")
    assert len(parts) == len(blocks) + 1 and parts[-1] == "", \
        f"the shell stopped early (rc {proc.returncode}):\n{proc.stdout}"
    return parts[:-1]


REF_SECTIONS = sections(read_reference()) if os.path.exists(REFERENCE) else []
EXAMPLE_SECTIONS = [(t, b) for t, b in REF_SECTIONS if examples(b)]


def test_reference_has_examples():
    assert len(EXAMPLE_SECTIONS) >= len(SCALARS) - 2 + len(TABLES)


@pytest.mark.parametrize("title,body", EXAMPLE_SECTIONS, ids=[t for t, _ in EXAMPLE_SECTIONS])
def test_reference_examples(tmp_path, title, body):
    pairs = examples(body)
    assert pairs[0][0].lstrip().startswith("SELECT tq_clock("), \
        f"section {title!r} must start by pinning the clock with tq_clock"
    outputs = run_section(tmp_path, [sql for sql, _ in pairs])
    for (sql, expected), actual in zip(pairs, outputs):
        # The shell's error prefix: "Runtime error near line N:" in 3.40, "Error near line N:" in 3.52.
        actual, expected = (re.sub(r"(?m)^Runtime error near line", "Error near line", t) for t in (actual, expected))
        assert actual == expected, f"in section {title!r}, the block\n{sql}\nprinted\n{actual}\nnot\n{expected}"


# ---------------------------------------------------------------- coverage and flags

def registered():
    """(scalars {(name, narg): flags}, eponymous tables) as a fresh connection sees them."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.enable_load_extension(True)
        conn.load_extension(EXT)
        scalars = {}
        for name, narg, flags in conn.execute(
                "SELECT name, narg, flags FROM pragma_function_list WHERE name LIKE 'tq%'"):
            assert (name, narg) not in scalars, f"{name}/{narg} listed twice"
            scalars[(name, narg)] = flags
        tables = {r[0] for r in conn.execute("SELECT name FROM pragma_module_list WHERE name LIKE 'tq%'")}
        return scalars, tables
    finally:
        conn.close()


def flag_of(flags):
    direct, innocuous = bool(flags & DIRECTONLY), bool(flags & INNOCUOUS)
    assert not (direct and innocuous), "a function cannot be both DIRECTONLY and INNOCUOUS"
    return "directonly" if direct else "innocuous" if innocuous else "trigger-callable"


def test_every_registered_function_has_a_section():
    scalars, tables = registered()
    names = {name for name, _ in scalars} | tables
    titles = {t for t, _ in REF_SECTIONS}
    missing = sorted(names - titles)
    assert not missing, f"docs/reference.md has no section for {missing}"
    assert {"Enqueue from a trigger", "Transactions"} <= titles


def test_function_index_lists_every_section():
    text = read_reference()
    index = text.split("\n## ", 2)[1] if "\n## " in text else ""
    assert index.startswith("Function index"), "the first section is the function index"
    scalars, tables = registered()
    for name in sorted({n for n, _ in scalars} | tables):
        assert f"[`{name}" in index, f"the function index does not link {name}"


def test_exact_functions_and_flags():
    scalars, tables = registered()
    assert {k: flag_of(v) for k, v in scalars.items()} == SCALARS
    assert tables == set(TABLES)


def test_flags_match_design_md():
    """docs/design.md's "Function flags" list, read literally, agrees with what is registered."""
    with open(DESIGN, encoding="utf-8") as f:
        design = f.read()
    part = design.split("## Function flags", 1)[1].split("\n## ", 1)[0]
    listed = {}
    items = re.sub(r"\n[ \t]+", " ", part).split("\n")   # a bullet's continuation lines join it
    for line in items:
        kind = ("innocuous" if line.startswith("- INNOCUOUS") else
                "trigger-callable" if line.startswith("- Callable from triggers") else
                "directonly" if line.startswith("- DIRECTONLY") else None)
        if kind is None:
            continue
        for item in re.findall(r"`([^`]+)`", line.split(":", 1)[1]):
            name = item.split("(")[0]
            narg = None if "(" not in item else len([a for a in item[item.index("(") + 1:-1].split(",") if a.strip()])
            listed[(name, narg)] = kind
    scalars, _ = registered()
    for (name, narg), kind in listed.items():
        if name in TABLES:
            assert TABLES[name] == kind, name
            continue
        matches = {k: flag_of(v) for k, v in scalars.items() if k[0] == name and (narg is None or k[1] == narg)}
        assert matches, f"design.md lists {name} ({narg} args) but it is not registered"
        assert set(matches.values()) == {kind}, f"{name}: design.md says {kind}, registered {matches}"
    documented = {name for name, _ in listed}
    assert documented == {n for n, _ in SCALARS} | set(TABLES) - {"tq_statements"}


def test_reference_states_each_flag():
    by_title = dict(REF_SECTIONS)
    expected = {name: flag for (name, _), flag in SCALARS.items() if name != "tq_queue"}
    expected.update(TABLES)
    for name, flag in expected.items():
        assert section_flag(by_title[name]) == flag, f"section {name} states the wrong flag"
    queue = by_title["tq_queue"]
    assert section_flag(queue) == "innocuous" and "directonly" in queue.lower()


def test_table_flags_hold_in_views(tmp_path):
    """tq_claim (DIRECTONLY) is refused in a view; the innocuous tables work there even
    with trusted_schema off."""
    db = str(tmp_path / "store.db")
    outputs = run_section(tmp_path, [
        "PRAGMA trusted_schema = OFF;\n"
        "CREATE VIEW claims AS SELECT * FROM tq_claim('q', 'w', 1);\n"
        "SELECT * FROM claims;\n",
        "CREATE VIEW observed AS SELECT (SELECT count(*) FROM tq_watch(0)) + (SELECT count(*) FROM tq_jobs)"
        " + (SELECT count(*) FROM tq_stats) + (SELECT count(*) >= 0 FROM tq_statements) AS n;\n"
        "SELECT n FROM observed;\n",
    ])
    assert outputs[0] == 'Parse error near line 3: unsafe use of virtual table "tq_claim"\n'
    assert outputs[1] == "1\n"
    assert os.path.exists(db)
