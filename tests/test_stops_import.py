"""A SIGTERM that lands while torch is being imported waits for that import to finish, then stops the program:
raised inside it, it could cross torch's C++ start-up frames, where it aborts the process (SIGABRT)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from zoo.testing import zoo_env

SCRIPT = textwrap.dedent("""
    import sys, time
    from zoo.core import stops
    stops.FRAGILE = ("slow_module",)  # stands in for torch, whose start-up runs C++ that calls back into Python
    stops.install()
    try:
        import slow_module  # sends itself SIGTERM half-way through its own top-level code
        print("imported", slow_module.DONE, flush=True)
        time.sleep(5)
        print("never stopped", flush=True)
    except stops.Stopped:
        print("stopped after the import" if "slow_module" in sys.modules else "stopped inside the import")
""")
MODULE = "import os, signal, time\nos.kill(os.getpid(), signal.SIGTERM)\ntime.sleep(0.3)\nDONE = True\n"


def test_sigterm_during_an_import_is_raised_after_it(tmp_path):
    (tmp_path / "slow_module.py").write_text(MODULE)
    env = zoo_env(tmp_path)
    env["PYTHONPATH"] = f"{tmp_path}:{env.get('PYTHONPATH', '')}"
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, env=env, text=True, capture_output=True,
                          timeout=60)
    assert proc.stdout.splitlines() == ["imported True", "stopped after the import"], proc.stdout + proc.stderr
