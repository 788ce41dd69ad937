"""Benchmarks for rl/ppo, each a real `python -m zoo train` run (CSV logs parsed afterwards).

    python scripts/evidence/bench_rl.py cartpole --seeds 1 2 3     # 475 (mean of last 20 episodes) within 100k steps?
    python scripts/evidence/bench_rl.py speed --steps 50000 --repeats 2   # zoo vs baseline_ppo.py, same settings
    python scripts/evidence/bench_rl.py acrobot --seeds 1          # eval return >= -100 within 200k steps?
    python scripts/evidence/bench_rl.py pendulum --seeds 1         # eval return >= -300 within 200k steps?
    PYTHONPATH=/tmp/sb3lib python scripts/evidence/bench_rl.py sb3 --seeds 1 2 3 --rounds 2
                                                                   # experiment=rl_cartpole vs SB3
    python scripts/evidence/bench_rl.py cleanrl --seeds 1 2 3 --rounds 2   # task=rl/ppo 100k steps vs baseline_ppo.py
    PYTHONPATH=/tmp/rl/sb3lib python scripts/evidence/bench_rl.py sb3_mujoco --env Hopper-v5 --steps 100000 \
        --seeds 1 2 3 --rounds 1                                   # experiment=rl_hopper vs sb3_ppo_mujoco.py
    python scripts/evidence/bench_rl.py phases experiment=rl_cartpole seed=1   # where one zoo run's time goes

Prints one JSON line per run and a markdown table at the end. Runs are written to a temporary folder.
`sb3` and `cleanrl` time each process from start to exit (wall and CPU seconds, with the load average), the zoo's as
a user runs it (TensorBoard, progress bar, evaluations, video, test after fit), in pairs of zoo and reference with
the same seed, back to back, the first of the pair alternating, so that a busy machine penalises both alike; the
per-pair ratio zoo / reference (median and spread over the pairs) is the number to read.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import HERE, ROOT, ZOO_MODULE, Run, Spread, csv_rows, run, this_command, write_record, zoo_env

QUIET = ["logger=csv", "callbacks.progress_bar=null", "trainer.enable_progress_bar=false",
         "task.module.video=false", "test_after_fit=false"]
MUJOCO = {"Hopper-v5": "rl_hopper", "HalfCheetah-v5": "rl_halfcheetah", "Walker2d-v5": "rl_walker2d"}
SUITES = {  # preset, threshold on the metric, metric ("last20": rollout mean of 20 episodes, "eval": val/return)
    "cartpole": ("rl_cartpole", 475.0, "last20"),
    "acrobot": ("rl_acrobot", -100.0, "eval"),
    "pendulum": ("rl_pendulum", -300.0, "eval"),
}


def zoo_train(overrides: list[str], timeout: float, attempts: int = 3) -> list[dict]:
    """One complete run's CSV rows. A run stopped by a stray SIGTERM (Lightning then exits 0 without the zoo's
    summary) is started again from scratch, up to `attempts` times, so that timings stay whole-run timings."""
    for attempt in range(1, attempts + 1):
        with tempfile.TemporaryDirectory() as tmp:
            done = run([*ZOO_MODULE, "train", *overrides, *QUIET], env=zoo_env(ZOO_OUTPUT_ROOT=tmp), timeout=timeout)
            done.check(f"zoo train {' '.join(overrides)}")
            if "zoo: finished" in done.output:
                (metrics,) = Path(tmp).glob("rl/ppo/*/csv/metrics.csv")
                return csv_rows(metrics)
            why = "SIGTERM" if "SIGTERM" in done.output else "no summary"
            print(json.dumps({"note": f"run interrupted ({why}), attempt {attempt}", "overrides": overrides}),
                  flush=True)
    raise SystemExit(f"zoo train {' '.join(overrides)} was interrupted {attempts} times")


def col(rows: list[dict], key: str) -> list[tuple[dict, float]]:
    return [(r, float(r[key])) for r in rows if r.get(key)]


def solve(suite: str, seed: int, timeout: float) -> dict:
    preset, threshold, metric = SUITES[suite]
    rows = zoo_train([f"experiment={preset}", f"seed={seed}"], timeout)
    train = col(rows, "train/env_steps")
    key = "rollout/return_last20" if metric == "last20" else "val/return"
    evals = col(rows, "val/return")
    hit = next(((r, v) for r, v in col(rows, key) if v >= threshold), None)
    out = {"suite": suite, "seed": seed, "threshold": threshold, "metric": key,
           "steps": train[-1][1], "seconds": round(float(train[-1][0]["train/time"]), 1),
           "steps_per_sec": round(float(train[-1][0]["train/steps_per_sec"]), 1),
           "final_eval": evals[-1][1] if evals else float("nan"),
           "best_eval": max(v for _, v in evals) if evals else float("nan")}
    if hit is not None:
        steps = float(hit[0].get("train/env_steps") or hit[0].get("val/env_steps"))
        t = next((float(r["train/time"]) for r, s in train if s >= steps), float("nan"))
        out.update(reached=True, steps_to_threshold=steps, seconds_to_threshold=round(t, 1))
    else:
        out.update(reached=False)
    if metric == "last20":
        out["final_last20"] = col(rows, key)[-1][1]
    return out


def speed(steps: int, repeats: int, timeout: float) -> list[dict]:
    """Alternates zoo and baseline runs so that a busy machine penalises both alike."""
    out = []
    for i in range(repeats):
        rows = zoo_train(["task=rl/ppo", f"task.module.total_timesteps={steps}", "task.module.eval_every=100000",
                          "task.module.eval_episodes=1", f"seed={i + 1}"], timeout)
        last = col(rows, "train/env_steps")[-1][0]
        out.append({"impl": "zoo", "seed": i + 1, "steps": float(last["train/env_steps"]),
                    "steps_per_sec": round(float(last["train/steps_per_sec"]), 1)})
        print(json.dumps(out[-1]), flush=True)
        p = subprocess.run([sys.executable, str(HERE / "baseline_ppo.py"), "--total-timesteps", str(steps),
                            "--seed", str(i + 1)], stdout=subprocess.PIPE, text=True, timeout=timeout, check=True)
        out.append(json.loads(p.stdout.strip().splitlines()[-1]))
        print(json.dumps(out[-1]), flush=True)
    return out


def timings(done: Run) -> dict:
    """Wall seconds, CPU seconds (user + system, the process and its children) and the load average before one
    subprocess. CPU time hardly depends on the other jobs on the machine; wall time does."""
    return {"wall_s": round(done.wall, 1), "cpu_s": round(done.cpu, 1), "load1": round(done.load_before, 1)}


def zoo_wall(overrides: list[str], timeout: float) -> dict:
    """`python -m zoo train <overrides>` exactly as a user runs it, timed from process start to exit; the rolling-20
    threshold step and the evaluations are read back from its TensorBoard file."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with tempfile.TemporaryDirectory() as tmp:
        done = run([*ZOO_MODULE, "train", *overrides], env=zoo_env(ZOO_OUTPUT_ROOT=tmp), timeout=timeout)
        if not done.ok or "zoo: finished" not in done.output:
            raise SystemExit(f"zoo train {' '.join(overrides)} failed ({done.status}):\n{done.output[-3000:]}")
        (tb,) = Path(tmp).glob("rl/ppo/*/tensorboard")
        acc = EventAccumulator(str(tb), size_guidance={"scalars": 0})
        acc.Reload()
    scalars = {k: acc.Scalars(k) for k in acc.Tags()["scalars"]}
    steps = {e.step: e.value for e in scalars["train/env_steps"]}
    hit = next((steps.get(e.step) for e in scalars.get("rollout/return_last20", []) if e.value >= 475), None)
    last = lambda k: scalars[k][-1].value if k in scalars else float("nan")  # noqa: E731
    return {"impl": "zoo", "steps": last("train/env_steps"), "steps_to_475": hit,
            "final_last20": last("rollout/return_last20"), "final_eval": last("val/return"),
            "test_eval": last("test/return"), **timings(done)}


def reference_wall(cmd: list[str], timeout: float) -> dict:
    done = run([sys.executable, *cmd], timeout=timeout)
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    if not done.ok or not last.startswith("{"):
        raise SystemExit(f"{' '.join(cmd)} failed ({done.status}):\n{done.output[-3000:]}")
    return {**json.loads(last), **timings(done)}


def steps(v: float | None) -> str:
    return "-" if v is None else f"{int(v):,}"


def side_by_side(suite: str, seeds: list[int], rounds: int, timeout: float, env: str = "Hopper-v5",
                 n_steps: int = 100_000) -> None:
    """Pairs of zoo and reference runs with the same seed, back to back (which one goes first alternates from pair to
    pair, so that a load that rises or falls through a pair favours neither); `rounds` passes over the seeds. The
    per-pair ratios are the numbers to read on a shared machine: a pair's two runs see about the same load."""
    if suite.startswith("sb3"):
        probe = subprocess.run([sys.executable, "-c", "import stable_baselines3"], capture_output=True)
        if probe.returncode != 0:
            print("stable-baselines3 is not importable; install it outside the project: .venv/bin/pip install "
                  "--target /tmp/sb3lib --no-deps stable-baselines3, then run with PYTHONPATH=/tmp/sb3lib")
            return
    zoo_args, script, extra = {
        "sb3": (lambda s: ["experiment=rl_cartpole", f"seed={s}"], "bench_sb3_cartpole.py", []),
        "cleanrl": (lambda s: ["task=rl/ppo", f"seed={s}"], "baseline_ppo.py", []),
        "sb3_mujoco": (lambda s: [f"experiment={MUJOCO[env]}", f"seed={s}", f"task.module.total_timesteps={n_steps}"],
                       "sb3_ppo_mujoco.py", ["--env", env, "--steps", str(n_steps)]),
    }[suite]
    pairs = []
    for i, seed in enumerate([s for _ in range(rounds) for s in seeds]):
        run_zoo = lambda: zoo_wall(zoo_args(seed), timeout)  # noqa: E731
        run_ref = lambda: reference_wall([str(HERE / script), "--seed", str(seed), *extra], timeout)  # noqa: E731
        if i % 2 == 0:
            zoo, ref = run_zoo(), run_ref()
        else:
            ref, zoo = run_ref(), run_zoo()
        pairs.append((seed, "zoo" if i % 2 == 0 else "ref", zoo, ref))
        print(json.dumps({"pair": i + 1, "seed": seed, "first": pairs[-1][1], "zoo": zoo, "ref": ref}), flush=True)
    report(suite, pairs)
    record(suite, pairs, env, n_steps)


def record(suite: str, pairs: list[tuple[int, str, dict, dict]], env: str, n_steps: int) -> None:
    """The zoo / reference wall ratio (and, for cleanrl, what task=rl/ppo itself reaches) as records, which README
    and the rl pages render."""
    if suite == "sb3_mujoco" and n_steps != 100_000:
        return  # the pages quote the 100k-step pairs
    record_id, what = {"cleanrl": ("rl.baseline_ppo_ratio", "task=rl/ppo / scripts/evidence/baseline_ppo.py"),
                       "sb3": ("rl.sb3_cartpole_ratio", "rl_cartpole / SB3's CartPole recipe"),
                       "sb3_mujoco": (f"rl.sb3_{env.split('-')[0].lower()}_ratio", f"{MUJOCO[env]} / SB3")}[suite]
    wall = Spread.of(z["wall_s"] / r["wall_s"] for _, _, z, r in pairs)
    loads = [p[w]["load1"] for p in pairs for w in (2, 3)]
    load = f"{min(loads):.1f}-{max(loads):.1f}"
    print("record:", write_record(
        record_id, round(wall.median, 2), metric=f"wall time, {what}, median of {wall.n} pairs",
        command=this_command(), load=load,
        extra={"min": round(wall.min, 2), "max": round(wall.max, 2), "pairs": wall.n,
               "cpu_ratio": round(Spread.of(z["cpu_s"] / r["cpu_s"] for _, _, z, r in pairs).median, 2)}))
    if suite == "cleanrl":  # the default task's own return: CleanRL's defaults do not solve CartPole in 100k steps
        per_seed = {seed: z["final_last20"] for seed, _, z, _ in pairs}
        print("record:", write_record(
            "rl.cartpole_default_return", round(Spread.of(per_seed.values()).median),
            metric="rollout/return_last20 at the end of task=rl/ppo, median over the seeds (solved: 475)",
            command=this_command(), load=load,
            extra={"seeds": [round(per_seed[s]) for s in sorted(per_seed)], "solved": 475, "steps": 100_000}))


def report(suite: str, pairs: list[tuple[int, str, dict, dict]]) -> None:
    name = "SB3" if suite.startswith("sb3") else "plain PPO"
    # SB3's script evaluates 10 deterministic episodes at the end; the plain PPO reports its last 20 episodes.
    zkey, rkey, what = ("final_eval", "final_eval", "final eval") if suite.startswith("sb3") else \
        ("final_last20", "return_last20", "last-20 return")
    print(f"| pair | seed | load zoo-{name} | zoo s | {name} s | zoo/{name} wall | zoo/{name} CPU "
          f"| rolling-20 >= 475 at: zoo / {name} | {what}: zoo / {name} |")
    print("|---|---|---|---|---|---|---|---|---|")
    for i, (seed, _, zoo, ref) in enumerate(pairs):
        print(f"| {i + 1} | {seed} | {zoo['load1']:.1f}-{ref['load1']:.1f} | {zoo['wall_s']:.1f} "
              f"| {ref['wall_s']:.1f} | {zoo['wall_s'] / ref['wall_s']:.2f} | {zoo['cpu_s'] / ref['cpu_s']:.2f} "
              f"| {steps(zoo.get('steps_to_475'))} / {steps(ref.get('steps_to_475'))} "
              f"| {zoo[zkey]:.1f} / {ref[rkey]:.1f} |")
    wall = [z["wall_s"] / r["wall_s"] for _, _, z, r in pairs]
    cpu = [z["cpu_s"] / r["cpu_s"] for _, _, z, r in pairs]
    solved = lambda key, runs: sum(r.get(key) is not None for r in runs)  # noqa: E731
    print(f"ratio zoo/{name} over {len(pairs)} pairs: wall {Spread.of(wall).median_range()}; "
          f"CPU {Spread.of(cpu).median_range()}")
    total = lambda key, who: sum(p[who][key] for p in pairs)  # noqa: E731
    loads = [p[w]["load1"] for p in pairs for w in (2, 3)]
    print(f"totals: zoo {total('wall_s', 2):.0f} s wall / {total('cpu_s', 2):.0f} s CPU, {name} "
          f"{total('wall_s', 3):.0f} s / {total('cpu_s', 3):.0f} s; load average (1 min) {min(loads):.1f} to "
          f"{max(loads):.1f}")
    print(f"rolling-20 >= 475 within the run: zoo {solved('steps_to_475', [z for _, _, z, _ in pairs])}/{len(pairs)}, "
          f"{name} {solved('steps_to_475', [r for _, _, _, r in pairs])}/{len(pairs)}")


def phases(overrides: list[str]) -> None:
    """Run `zoo train <overrides>` in this process with timers around PPO's phases; print them as one JSON line.
    (cProfile's per-call overhead inflates the many small calls of a PPO update several times over.)"""
    t_start = time.perf_counter()
    from omegaconf import OmegaConf

    from zoo.imports import install

    # The wrappers below need Lightning before the job starts: install the task's lean imports here, as Hydra would.
    install(OmegaConf.load(ROOT / "configs" / "task" / "rl" / "ppo.yaml").hydra.callbacks.lean_imports.absent)
    import gymnasium as gym
    import lightning.pytorch as pl

    import zoo.rl.models.agents
    import zoo.rl.module
    import zoo.rl.normalize
    import zoo.rl.rollout
    spent: dict[str, float] = {}

    def timed(cls: type, name: str, label: str) -> None:
        fn = getattr(cls, name)

        def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[label] = spent.get(label, 0.0) + time.perf_counter() - t

        setattr(cls, name, wrapper)

    t_imported = time.perf_counter()
    for cls, name, label in [(pl.Trainer, "fit", "fit"), (pl.Trainer, "test", "test_after_fit"),
                             (zoo.rl.module.PPO, "training_step", "updates"),
                             (zoo.rl.rollout.Collector, "collect", "rollouts"),
                             (zoo.rl.module.PPO, "_learn", "optimizer_steps"),
                             (zoo.rl.module.PPO, "_log_update", "logging"),
                             (zoo.rl.module.PPO, "_evaluate", "evaluations"),
                             (zoo.rl.module.PPO, "on_train_end", "video"),
                             # inside the rollouts: the envs' steps, the policy's forward, the normalisers
                             (gym.wrappers.vector.RecordEpisodeStatistics, "step", "rollout_env_step"),
                             (zoo.rl.models.agents.MLPAgent, "act", "rollout_policy_forward"),
                             (zoo.rl.rollout.Collector, "process_obs", "rollout_obs_normalise"),
                             (zoo.rl.normalize.RewardScaler, "__call__", "rollout_reward_scale")]:
        timed(cls, name, label)
    from zoo.cli import main as zoo_main

    sys.argv = ["zoo", "train", *overrides]
    try:
        zoo_main()
    finally:
        total = time.perf_counter() - t_start
        out = {"import_lightning_rl_s": round(t_imported - t_start, 2),
               **{k: round(v, 2) for k, v in spent.items()}, "process_s": round(total, 2)}
        print(json.dumps(out), flush=True)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "phases":
        phases(sys.argv[2:])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("suite", choices=[*SUITES, "speed", "sb3", "cleanrl", "sb3_mujoco"])
    ap.add_argument("--env", default="Hopper-v5", choices=list(MUJOCO), help="sb3_mujoco: the environment")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--steps", type=int, default=50_000, help="speed, sb3_mujoco: environment steps per run")
    ap.add_argument("--repeats", type=int, default=2, help="speed: zoo/baseline pairs")
    ap.add_argument("--rounds", type=int, default=2, help="sb3/cleanrl: passes over the seeds (pairs = seeds x rounds)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per run")
    a = ap.parse_args()
    if a.suite in ("sb3", "cleanrl", "sb3_mujoco"):
        side_by_side(a.suite, a.seeds, a.rounds, a.timeout, a.env, a.steps)
        return
    if a.suite == "speed":
        runs = speed(a.steps, a.repeats, a.timeout)
        for impl in ("zoo", "baseline"):
            sps = [r["steps_per_sec"] for r in runs if r["impl"] == impl]
            print(f"| {impl} | {len(sps)} runs x {a.steps} steps | mean {sum(sps) / len(sps):.0f} steps/s "
                  f"| {', '.join(f'{s:.0f}' for s in sps)} |")
        return
    results = []
    for seed in a.seeds:
        results.append(solve(a.suite, seed, a.timeout))
        print(json.dumps(results[-1]), flush=True)
    print("| seed | reached | steps to threshold | seconds to threshold | final eval | best eval | steps/s |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['seed']} | {r['reached']} | {r.get('steps_to_threshold', '-')} | "
              f"{r.get('seconds_to_threshold', '-')} | {r['final_eval']:.1f} | {r['best_eval']:.1f} | "
              f"{r['steps_per_sec']:.0f} |")
    hits = [r["steps_to_threshold"] for r in results if r["reached"]]
    if hits:  # the rl pages render the steps each seed needed from this record
        print("record:", write_record(
            f"rl.{a.suite}_steps_to_threshold", round(Spread.of(hits).median),
            metric=f"environment steps until {results[0]['metric']} >= {results[0]['threshold']:g}, median of the "
                   "seeds that reached it", command=this_command(), preset=SUITES[a.suite][0],
            extra={"seeds_k": [round(r["steps_to_threshold"] / 1000, 1) if r["reached"] else None for r in results],
                   "reached": len(hits), "seeds": a.seeds,  # JSON has no NaN: a run without evaluations is null
                   "final_eval": [r["final_eval"] if r["final_eval"] == r["final_eval"] else None for r in results]}))


if __name__ == "__main__":
    main()
