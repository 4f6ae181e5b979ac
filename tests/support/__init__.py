"""Programs the tests run or import that are not tests themselves: worker processes
(proc_worker.py), the soak (soak.py and its Python and Node processes), the power-cut VFS
(cutvfs.py), the clock shifter preloaded by test_clock_jumps.py (clockshift.c), and the
scenarios run on a second SQLite through apsw (run_apsw.py)."""
