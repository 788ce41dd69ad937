"""What the evidence scripts share: where the repository and the shared data are, how they start the zoo CLI, how
they read back what a run printed or logged, and the median / quartile figures the docs quote.

Scripts here run as `python scripts/evidence/<name>.py` (from any folder); Python then puts this folder on sys.path,
so they `from common import ...`. Importing this module puts the repository root on sys.path, the one place that
does it, so that `zoo`, `vision`, ... import from this checkout. Standard library only: `bench_deploy.py play` must
run in a process that never imports torch.
"""

from __future__ import annotations

import csv
import os
import re
import resource
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The real data sets (flowers12, CR/SUBJ, FSDD) live beside the checkout, not in it.
SHARED = Path(os.environ.get("ZOO_SHARED_DATA", ROOT.parent / "shared" / "data"))

# `python -m zoo`, as a user types it. The only form for DDP runs: Lightning's launcher re-runs this command line
# for ranks 1..N-1, which it cannot do for a `python -c` one.
ZOO_MODULE = [sys.executable, "-m", "zoo"]
# The same CLI (zoo.cli:main) started through -c, so that a broad `pkill -f "zoo train"` by someone else on a
# shared machine does not end a long benchmark. Single-process runs only (see ZOO_MODULE).
ZOO = [sys.executable, "-c", "import sys; from zoo.cli import main; main(sys.argv[1:])"]


def shown(cmd: list[str]) -> str:
    """A command line as a user would type it: either zoo prefix reads `python -m zoo`, the interpreter `python`."""
    for prefix in (ZOO, ZOO_MODULE):
        if cmd[: len(prefix)] == prefix:
            return " ".join(["python -m zoo", *cmd[len(prefix):]])
    return " ".join(["python" if cmd[0] == sys.executable else cmd[0], *cmd[1:]])


def zoo_env(**extra: str) -> dict[str, str]:
    """This process's environment with the repository root first on PYTHONPATH (what was there stays after it,
    e.g. wheels carried to a GPU machine) and the `extra` variables set."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for a torchrun rendezvous on this machine)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load1() -> float:
    """The 1-minute load average: how busy the (shared) machine was around a timing."""
    return os.getloadavg()[0]


def children_cpu() -> float:
    """User + system CPU seconds of this process's finished children so far. Unlike wall time, a run's CPU time
    hardly depends on the other jobs on the machine."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


@dataclass
class Run:
    """One subprocess that finished or was killed at its timeout."""

    cmd: list[str]
    returncode: int | None  # None: killed at the timeout
    stdout: str
    stderr: str
    wall: float  # seconds from start to exit (or kill)
    cpu: float  # user + system seconds of the process and the children it waited for
    load_before: float
    load_after: float
    timeout: float | None = None

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def status(self) -> str:
        """"ok", "rc=<exit code>" or "timeout <s>s"."""
        if self.returncode is None:
            return f"timeout {self.timeout:g}s"
        return "ok" if self.ok else f"rc={self.returncode}"

    @property
    def output(self) -> str:
        """stdout, then stderr: everything the run printed."""
        return self.stdout + self.stderr

    @property
    def load(self) -> str:
        return f"load {self.load_before:.1f}->{self.load_after:.1f}"

    def tail(self, lines: int = 5) -> str:
        return "\n".join(self.output.strip().splitlines()[-lines:])

    def check(self, what: str) -> Run:
        """This run if it exited 0; otherwise exit this script with its status and the end of its output."""
        if not self.ok:
            raise SystemExit(f"{what} failed ({self.status}):\n{self.output[-3000:]}")
        return self

    def printed(self, label: str) -> str | None:
        """The value the zoo printed after `<label>:`, e.g. "best checkpoint" or "run dir"; None if absent."""
        return printed(self.output, label)

    def metrics(self, stages: tuple[str, ...] = ("test",)) -> dict[str, float]:
        return printed_metrics(self.output, stages)


def run(cmd: list[str], *, env: dict[str, str] | None = None, timeout: float | None = None,
        cwd: Path = ROOT) -> Run:
    """Run `cmd` to the end (or until `timeout` seconds, then kill it), its output captured; never raises for a
    failed or killed run: the caller decides (Run.check)."""
    load0, cpu0, t0 = load1(), children_cpu(), time.perf_counter()
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        code, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:  # what it printed so far (bytes, whatever text=True asked for)
        code, out, err = None, _text(e.stdout), _text(e.stderr)
    wall, cpu = time.perf_counter() - t0, children_cpu() - cpu0
    return Run(cmd, code, out, err, wall, cpu, load0, load1(), timeout)


def _text(data: bytes | str | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


def printed(text: str, label: str) -> str | None:
    found = re.search(rf"{re.escape(label)}:\s+(\S+)", text)
    return found.group(1) if found else None


def printed_metrics(text: str, stages: tuple[str, ...] = ("test",)) -> dict[str, float]:
    """The `<stage>/<name>  <value>` rows of the metrics table a zoo run prints at the end of its test stage."""
    pattern = rf"^\s+((?:{'|'.join(stages)})/\w+)\s+(-?\d[\d.]*(?:e[-+]?\d+)?)$"
    return {m.group(1): float(m.group(2)) for m in re.finditer(pattern, text, re.M)}


def csv_rows(metrics_csv: Path) -> list[dict[str, str]]:
    """The rows of a CSVLogger metrics.csv, one per logging call (a row holds the keys logged at that step)."""
    with Path(metrics_csv).open(newline="") as f:
        return list(csv.DictReader(f))


def csv_series(metrics_csv: Path) -> dict[str, list[float]]:
    """Every numeric value logged per metric key, in order."""
    out: dict[str, list[float]] = {}
    for row in csv_rows(metrics_csv):
        for k, v in row.items():
            if v not in ("", None):
                try:
                    out.setdefault(k, []).append(float(v))
                except ValueError:
                    pass
    return out


@dataclass(frozen=True)
class Spread:
    """Median, quartiles (statistics.quantiles' default method) and range of repeated measurements."""

    median: float
    q1: float
    q3: float
    min: float
    max: float
    n: int

    @classmethod
    def of(cls, values: Iterable[float]) -> Spread:
        xs = sorted(values)
        if not xs:
            raise ValueError("Spread.of: no values")
        q1, _, q3 = statistics.quantiles(xs, n=4) if len(xs) > 1 else (xs[0],) * 3
        return cls(statistics.median(xs), q1, q3, xs[0], xs[-1], len(xs))

    def median_range(self, fmt: str = ".2f") -> str:
        """"median M (min A, max B)"."""
        return f"median {self.median:{fmt}} (min {self.min:{fmt}}, max {self.max:{fmt}})"


# ------------------------------------------------------------------------------------------------------ records
# Every number the docs quote comes from one record: a JSON file under docs/results/records/, written by the command
# that measured it. Tables in README.md, the guides and the results pages are rendered from these files.
RECORDS = ROOT / "docs" / "results" / "records"


def commit() -> str:
    """The checkout's commit (with "+dirty" when files differ from it): which code measured a number."""
    try:
        sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return sha + ("+dirty" if dirty else "")


def this_command() -> str:
    """The command line that started this script, as a reader would type it again (with its OMP_NUM_THREADS)."""
    threads = os.environ.get("OMP_NUM_THREADS")
    script = Path(sys.argv[0]).resolve()
    where = script.relative_to(ROOT).as_posix() if script.is_relative_to(ROOT) else sys.argv[0]
    return " ".join([*([f"OMP_NUM_THREADS={threads}"] if threads else []), "python", where, *sys.argv[1:]])


def write_record(record_id: str, value: float | int | str, *, metric: str, command: str, unit: str = "",
                 preset: str | None = None, load: str | None = None, extra: dict | None = None) -> Path:
    """Write (or replace) docs/results/records/<record_id>.json: the value, what it measures, the command a reader
    runs to measure it again, the commit and date, the machine's load while it ran. `record_id` is lower-case
    `<domain>.<what>` (e.g. `speech.so762_wer`); `extra` holds the figures a table shows beside it (spreads, seeds,
    seconds), plain JSON values only."""
    import datetime
    import json

    if not re.fullmatch(r"[a-z0-9_]+(\.[a-z0-9_]+)+", record_id):
        raise ValueError(f"record id {record_id!r}: lower-case <domain>.<what>")
    record = {"id": record_id, "value": value, "metric": metric, "unit": unit, "command": command,
              "preset": preset, "commit": commit(), "date": datetime.date.today().isoformat(),
              "machine": f"{os.cpu_count()} CPU cores", "load": load if load is not None else f"{load1():.1f}",
              "extra": extra or {}}
    RECORDS.mkdir(parents=True, exist_ok=True)
    path = RECORDS / f"{record_id}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2, allow_nan=False) + "\n")
    os.replace(tmp, path)
    return path
