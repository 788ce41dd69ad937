"""A run's recorded config against today's: the values to pin when its own overrides are not enough (`zoo
reproduce`), or no longer compose (a resume, `zoo test`/`predict`/`export` of a run whose preset was renamed since)."""

from __future__ import annotations

import sys
from typing import Any

from zoo.core.overrides import carried_overrides, is_location, override_key
from zoo.core.presets import recorded_overrides
from zoo.errors import ZooError

# Top-level nodes that belong to one command, never a run's setting to carry: where it writes, what it resumes,
# per-command options.
PER_COMMAND = ("run_dir", "ckpt_path", "input", "predict", "reproduce", "hydra", "trust_artifact")


def flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def pinned_values(recorded: dict[str, Any], now: dict[str, Any], asked: set[str],
                  not_pinned: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    """`key=<recorded value>` for every value today's config would set differently; notes for recorded keys that no
    longer exist (they cannot be set) and new keys (their defaults apply). Keys under a `not_pinned` top-level node,
    and those the user sets (`asked`), are left alone."""
    skip = lambda k: k.split(".")[0] in not_pinned or k in asked  # noqa: E731
    pins = [f"{k}={hydra_literal(v)}" for k, v in recorded.items() if k in now and now[k] != v and not skip(k)]
    notes = []
    if pins:
        notes.append(f"config: {len(pins)} value(s) that today's defaults would change, pinned to the recorded ones: "
                     + ", ".join(pins[:6]) + (" ..." if len(pins) > 6 else ""))
    gone = [k for k in recorded if k not in now and not skip(k)]
    if gone:
        notes.append(f"config: recorded option(s) that no longer exist, so cannot be set: {', '.join(gone[:6])}")
    new = [k for k in now if k not in recorded and not skip(k)]
    if new:
        notes.append(f"config: option(s) added since the run, at their defaults: {', '.join(new[:6])}")
    return pins, notes


def hydra_literal(value: Any) -> str:
    """A recorded plain value in Hydra's override grammar."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra_literal(v)}" for k, v in value.items()) + "}"
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


_ABSENT = object()


def frozen_overrides(listed: Any, cfg: Any) -> list[str]:
    """A run's overrides as its checkpoint records them for a resume or a reproduction: an interpolated value
    (`seed=${oc.env:SEED}`) frozen to what it gave this run, in its type (`seed=7`), so that a replay needs no variable
    and reads no number as text. Hydra's list resolves them as text: `seed='${oc.decode:${oc.env:SEED}}'` gave
    `seed='7'`, which the resume then read as a string."""
    from omegaconf import OmegaConf

    from zoo.core.config import is_group_choice

    raw = OmegaConf.to_container(listed, resolve=False) if OmegaConf.is_config(listed) else list(listed)
    assert isinstance(raw, list)  # the list's own strings, their interpolations unresolved
    out = []
    for text, o in zip(list(listed), raw, strict=True):
        o = str(o)
        key = override_key(o)
        if "${" not in o or is_group_choice(key):
            out.append(str(text))  # a group choice is a name: Hydra's text is it
            continue
        try:
            value = OmegaConf.select(cfg, key, default=_ABSENT)
        except Exception:  # noqa: BLE001 - unresolvable here: Hydra's text, as before
            value = _ABSENT
        if value is _ABSENT:
            out.append(str(text))
            continue
        if OmegaConf.is_config(value):
            value = OmegaConf.to_container(value, resolve=True)
        out.append(f"{o[: len(o) - len(o.lstrip('+~'))]}{key}={hydra_literal(value)}")
    return out


def recorded_values(recorded: dict, base: list[str], asked: set[str], scope: str = "",
                    not_pinned: tuple[str, ...] = (), args: list[str] | None = None) -> list[str]:
    """Overrides that set, on top of the config `base` composes, the values a run `recorded` (its resolved config;
    under the node `scope` only, when given): `key=value` where today's would differ, `++key=value` for keys it no
    longer has. Keys the user sets (`asked`), folders, top-level nodes in `not_pinned`, and the keys inside a node
    that follows another (`task.module.env: ${task.env}`: only its source is pinned; Hydra cannot set a key inside an
    interpolation) are left alone. The recorded values are artifact data: one line when they name code outside the
    allow-list (zoo.core.trust), unless the user opted in (`args`)."""
    from omegaconf import OmegaConf

    from zoo.base import plain
    from zoo.core import trust
    from zoo.core.config import compose

    composed = compose(base)
    prefix = f"{scope}." if scope else ""
    node = OmegaConf.select(composed, scope) if scope else composed
    now = flatten(plain(node), prefix)
    own = flatten(OmegaConf.to_container(node, resolve=False), prefix)  # type: ignore[arg-type]
    was = {k: v for k, v in flatten(recorded, prefix).items() if not is_location(k)}
    pins, _ = pinned_values(was, {k: v for k, v in now.items() if k in own}, asked, not_pinned)
    added = [f"++{k}={hydra_literal(v)}" for k, v in was.items()
             if k not in now and k not in asked and k.split(".")[0] not in not_pinned]
    trust.check_overrides([*pins, *added], "the checkpoint's recorded config", args)
    return [*pins, *added]


def checkpoint_overrides(ckpt: dict, task: str, user: list[str], tail: list[str]) -> list[str]:
    """The checked overrides that rebuild a checkpoint's task config to evaluate or export it: `task=<task>`, the
    training overrides it carries (less the trainer's: device settings are the evaluation's own), the user's, `tail`.

    When its own overrides no longer compose while the user's do (a preset renamed or removed since the run), those
    that still compose are kept and the task config the checkpoint recorded is pinned value by value on top, with
    one line saying so: a trained model must stay testable whatever happened to the preset it was trained with."""
    from zoo.core.config import check_overrides

    zoo = ckpt.get("zoo") or {}
    asked = {override_key(o) for o in user}  # the user's value replaces the recorded one, not stacked after it
    carried = [o for o in carried_overrides(recorded_overrides(zoo, args=user))
               if not o.startswith(("trainer", "task=")) and override_key(o) not in asked]
    overrides = [f"task={task}", *carried, *user, *tail]
    try:
        check_overrides(overrides, sweeps=False)
    except ZooError as e:
        overrides = rebuilt_overrides(zoo, task, carried, user, tail, str(e))
    check_applied(ckpt, overrides, user)
    return overrides


def rebuilt_overrides(zoo: dict, task: str, carried: list[str], user: list[str], tail: list[str], reason: str) \
        -> list[str]:
    """A checkpoint whose own overrides no longer compose: those that do, the recorded task config pinned on top."""
    from zoo.core.config import check_overrides

    recorded = (zoo.get("config") or {}).get("task")
    if not carried or not isinstance(recorded, dict):
        raise ZooError(reason)
    kept = composable(carried, [f"task={task}", *tail])
    fresh = [f"task={task}", *kept, *user, *tail]
    check_overrides(fresh, sweeps=False)  # a mistake in the user's own overrides is theirs to read
    pins = recorded_values(recorded, fresh, {override_key(o) for o in user}, scope="task", args=user)
    say_rebuilt(reason, len(carried) - len(kept), len(pins))
    overrides = [f"task={task}", *kept, *pins, *user, *tail]
    check_overrides(overrides, sweeps=False)
    return overrides


def check_applied(ckpt: dict, overrides: list[str], user: list[str]) -> None:
    """The evaluating verbs rebuild the model from the checkpoint's hyper-parameters, so a user's override that
    changes `task.module` (directly, or through an interpolation: `task.env.id` feeds `task.module.env`) would be
    dropped unless the checkpoint holds that very value: refuse it in one line instead."""
    from omegaconf import OmegaConf

    from zoo.base import plain
    from zoo.core.config import compose

    mine = [o for o in user if override_key(o).startswith("task.") or override_key(o) == "experiment"]
    if not mine:
        return
    without = [o for o in overrides if o not in mine]
    module_of = lambda o: flatten(plain(OmegaConf.select(compose(o), "task.module")) or {})  # noqa: E731
    asked, base = module_of(overrides), module_of(without)
    hp = flatten(dict(ckpt.get("hyper_parameters") or {}))
    for key in sorted(set(asked) | set(base)):
        if asked.get(key, _ABSENT) != base.get(key, _ABSENT) and hp.get(key, _ABSENT) != asked.get(key, _ABSENT):
            had = f"task.module.{key}={hydra_literal(hp[key])}" if key in hp else f"no task.module.{key}"
            raise ZooError(f"{' '.join(mine)}: the trained model keeps its own settings ({had}, as trained), so "
                           "this override would be dropped; leave it out to evaluate the model as trained, or train "
                           "from the checkpoint with task.module.pretrained=<ckpt> and the new value")


def composable(overrides: list[str], base: list[str]) -> list[str]:
    """Those of `overrides` that still compose, in order, on top of `base` and of each other (a renamed preset's
    `experiment=` does not; the run's `logger=csv` and its own values do, and are kept as they were)."""
    from zoo.core.config import compose

    kept: list[str] = []
    for o in overrides:
        try:
            compose([*base, *kept, o])
        except Exception:  # noqa: BLE001, S112 - Hydra's composition errors: the override no longer applies
            continue
        kept.append(o)
    return kept


def say_rebuilt(reason: str, dropped: int, pinned: int | None) -> None:
    count = "" if pinned is None else f" ({pinned} pinned)"
    print(f"zoo: note: the checkpoint's training overrides no longer compose ({reason.split(':')[0]}); rebuilding "
          f"its config without the {dropped} that fail, from the values it recorded{count}",
          file=sys.stderr, flush=True)
