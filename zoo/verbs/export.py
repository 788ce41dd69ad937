"""`python -m zoo export`: a checkpoint -> ONNX / TorchScript / ExportedProgram + model.json, parity-checked.

The verb knows no domain. The task's config names a deploy module (`task.deploy: zoo.vision.deploy`) that provides:

    FORMATS                                   formats the task exports, e.g. ("onnx", "torchscript")
    EXPORTER                                  "dynamo" or "torchscript": how torch.onnx.export runs for it
    export_graph(module) -> Graph             the nn.Module to export, input/output names, dynamic axes
    example_batches(module, cfg, n)           real inputs from the task's data: a list of Examples
    metadata(module, cfg) -> dict             model.json's task part: pre-processing, output meaning, labels
    extra_files(module) -> {name: bytes}      files written beside the model (the tokenizer); may be empty
    parity(ref, out) -> dict                  max_abs_diff, agreement, tolerance, ok (zoo.kit.deploy.compare helps)
    score(outputs, targets) -> (name, value)  the task metric on these examples, or None

plus the serving hooks that zoo/serve.py calls (`handler(...)`). Everything is written into a temp folder beside
the target and renamed into place at the end: a failed export (exporter error, parity beyond tolerance) leaves
nothing behind and an earlier export untouched. The temp folder holds the zoo's mark (owned.mark_owner): one that a
killed export left is removed by the next export into the same place once its writer is gone; one without the mark
is named, never removed.
 The checkpoint is read from one snapshot (export_snapshot.py): config, weights and sha256 from the same bytes.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from zoo.core import owned
from zoo.core.overrides import override_key, override_value
from zoo.core.resume import checkpoint_argument
from zoo.errors import ZooError
from zoo.kit.deploy import Examples, Graph
from zoo.kit.hooks import find_hooks
from zoo.verbs.export_out import discard, out_dir, publish, staging_dir, write_manifest
from zoo.verbs.export_snapshot import snapshot

log = logging.getLogger("zoo")

FILES = {"onnx": "model.onnx", "torchscript": "model.ts", "exported_program": "model.pt2"}
QUANTIZE = ("none", "int8")
OPSET = 18






# ---------------------------------------------------------------------------------------------- engines
def require(package: str, what: str) -> Any:
    """Heavy engines are optional: one line naming the package when one is missing."""
    import importlib

    try:
        return importlib.import_module(package)
    except ImportError:
        pip = {"onnxruntime": "onnxruntime", "onnx": "onnx", "onnxscript": "onnxscript"}.get(package, package)
        raise ZooError(f"{what} needs the '{pip}' package, which is not installed; "
                       f"pip install {pip} (or pip install -e '.[deploy]')") from None


def ort_session(path: Path, threads: int | None = None) -> Any:
    ort = require("onnxruntime", "running an ONNX model")
    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = threads
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def numpy_outputs(out: Any) -> list[np.ndarray]:
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o.detach().cpu().numpy() if hasattr(o, "detach") else np.asarray(o) for o in outs]


class Runner:
    """Runs an exported file on numpy inputs: ONNX Runtime for .onnx, torch for TorchScript / ExportedProgram."""

    def __init__(self, path: Path, fmt: str, inputs: list[str], threads: int | None = None) -> None:
        self.fmt, self.inputs = fmt, inputs
        if fmt == "onnx":
            self.session = ort_session(path, threads)
        else:
            import warnings

            import torch

            with warnings.catch_warnings():  # torch.jit.load's deprecation notice: TorchScript is what was asked for
                warnings.simplefilter("ignore", FutureWarning)
                self.model = torch.jit.load(str(path)) if fmt == "torchscript" else \
                    torch.export.load(str(path)).module()

    def __call__(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        if self.fmt == "onnx":
            return self.session.run(None, dict(zip(self.inputs, arrays)))
        import torch

        with torch.inference_mode():
            return numpy_outputs(self.model(*[torch.from_numpy(np.ascontiguousarray(a)) for a in arrays]))


# ---------------------------------------------------------------------------------------------- writing
def write_model(graph: Graph, example: tuple, fmt: str, path: Path, exporter: str) -> None:
    """Export `graph` to `path` in `fmt`; an exporter failure is one ZooError naming the way out."""
    import torch

    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf), torch.no_grad():
            if fmt == "onnx":
                torch.onnx.export(graph.module, example, str(path), input_names=graph.inputs,
                                  output_names=graph.outputs, dynamic_axes=graph.dynamic or None,
                                  dynamo=exporter == "dynamo", opset_version=OPSET if exporter == "dynamo" else 17,
                                  external_data=False)
            elif fmt == "torchscript":
                torch.jit.save(torch.jit.trace(graph.module, example, check_trace=False), str(path))
            else:
                dims = tuple({axis: torch.export.Dim.AUTO for axis in graph.dynamic.get(name, {})}
                             for name in graph.inputs)
                torch.export.save(torch.export.export(graph.module, example, dynamic_shapes=dims), str(path))
    except Exception as e:  # noqa: BLE001 - the exporters raise many kinds; the user needs the first line
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        hint = "try export.exporter=torchscript or export.format=torchscript" if fmt == "onnx" else \
            "try export.format=onnx"
        raise ZooError(f"{fmt} export failed ({type(e).__name__}: {first}); {hint}") from None
    if fmt == "onnx":
        onnx = require("onnx", "checking an ONNX export")
        onnx.checker.check_model(str(path), full_check=True)


def quantize_int8(src: Path, dst: Path, mode: str, names: list[str], batches: list[Examples]) -> str:
    """ONNX Runtime int8: "dynamic" (int8 weights, activations quantized at run time: pays for MatMul-heavy models)
    or "static" (QDQ, per-channel weights, activation ranges calibrated on the real example batches: what CNNs need,
    since dynamic ConvInteger runs slower than fp32 convolutions). Returns the description for model.json."""
    require("onnxruntime", "export.quantize=int8")
    from onnxruntime import quantization as q

    root = logging.getLogger()
    level, root.level = root.level, max(root.level, logging.ERROR)  # ORT's "consider pre-processing" notices
    try:
        return _quantize(q, src, dst, mode, names, batches)
    finally:
        root.setLevel(level)  # only for the quantizer: the zoo's own warnings after it still reach the console


def _quantize(q: Any, src: Path, dst: Path, mode: str, names: list[str], batches: list[Examples]) -> str:
    if mode == "dynamic":
        q.quantize_dynamic(str(src), str(dst), weight_type=q.QuantType.QInt8)
        return "dynamic (int8 weights, activations quantized at run time)"

    class Reader(q.CalibrationDataReader):
        def __init__(self) -> None:
            self.feeds = iter([{n: t.cpu().numpy() for n, t in zip(names, b.inputs)} for b in batches])

        def get_next(self) -> dict | None:
            return next(self.feeds, None)

    q.quantize_static(str(src), str(dst), Reader(), quant_format=q.QuantFormat.QDQ, per_channel=True,
                      activation_type=q.QuantType.QUInt8, weight_type=q.QuantType.QInt8)
    n = sum(len(b.inputs[0]) for b in batches)
    return f"static (QDQ, per-channel int8 weights, uint8 activations calibrated on {n} validation examples)"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def io_spec(names: list[str], arrays: list[np.ndarray], dynamic: dict[str, dict[int, str]]) -> list[dict]:
    """[{name, shape (dynamic axes by name), dtype}] from example arrays."""
    out = []
    for name, a in zip(names, arrays):
        dyn = dynamic.get(name, {})
        out.append({"name": name, "shape": [dyn.get(i, int(s)) for i, s in enumerate(a.shape)], "dtype": str(a.dtype)})
    return out


# ---------------------------------------------------------------------------------------------- parity


def run_parity(deploy: Any, graph: Graph, batches: list[Examples], runner: Runner) -> dict:
    """Every example batch through PyTorch and the exported model, and the first example alone; the worst
    difference, the mean agreement (weighted by batch size) and the task metric of both."""
    import torch

    results, refs, outs, targets = [], [], [], []
    with torch.inference_mode():
        for b in batches:
            ref = numpy_outputs(graph.module(*b.inputs))
            out = runner([t.cpu().numpy() for t in b.inputs])
            results.append((len(b.inputs[0]), deploy.parity(ref, out)))
            refs.append(ref)
            outs.append(out)
            targets.append(b.targets)
        # The first example alone as well: a batch size the export was not traced with (a baked-in batch shows here).
        one = tuple(t[:1] for t in batches[0].inputs)
        single = deploy.parity(numpy_outputs(graph.module(*one)), runner([t.cpu().numpy() for t in one]))
    n = sum(k for k, _ in results)
    results.append((0, single))
    summary = {"examples": n, "max_abs_diff": max(r["max_abs_diff"] for _, r in results),
               "agreement": round(sum(k * r["agreement"] for k, r in results) / n, 6),
               "tolerance": results[0][1]["tolerance"], "ok": all(r["ok"] for _, r in results)}
    if all(t is not None for t in targets):
        torch_score, export_score = deploy.score(refs, targets), deploy.score(outs, targets)
        if torch_score is not None:
            summary["metric"] = {"name": torch_score[0], "torch": torch_score[1], "exported": export_score[1]}
    return summary


def split_examples(batches: list[Examples], n: int) -> tuple[list[Examples], list[Examples]]:
    """The first n examples, and the rest: held apart from an int8 calibration. With fewer than 2n examples in all,
    half each (a single example cannot be split: then the rest is empty)."""
    total = sum(len(b.inputs[0]) for b in batches)
    n = n if total >= 2 * n else max(1, (total + 1) // 2)
    first, rest, seen = [], [], 0
    for b in batches:
        k = len(b.inputs[0])
        cut = max(0, min(k, n - seen))
        if cut:
            first.append(Examples(tuple(t[:cut] for t in b.inputs), None if b.targets is None else b.targets[:cut]))
        if cut < k:
            rest.append(Examples(tuple(t[cut:] for t in b.inputs), None if b.targets is None else b.targets[cut:]))
        seen += k
    return first, rest


INT8_CRITERION = ("none enforced: int8 rounding changes the outputs by design, so no tolerance applies; the agreement "
                  "with PyTorch and the task metric of both are reported for you to judge")


def int8_parity(deploy: Any, graph: Graph, batches: list[Examples], runner: Runner, how: str,
                held_apart: bool) -> dict:
    """The int8 model against PyTorch on examples the calibration did not see (when there were enough), with the
    criterion actually applied stated in place of the fp32 tolerance that does not apply."""
    report = run_parity(deploy, graph, batches, runner)
    report.pop("tolerance", None)
    report.update(ok=None, criterion=INT8_CRITERION, quantization=how, held_apart=held_apart)
    if not held_apart:
        report["note"] = "too few examples to hold any apart: measured on the calibration examples"
    return report


# ---------------------------------------------------------------------------------------------- the verb
def check_options(opts: dict, deploy: Any, task: str) -> tuple[str, str, str]:
    fmt = str(opts.get("format", "onnx"))
    native = getattr(deploy, "NATIVE", {})
    if fmt not in FILES and fmt not in native:
        raise ZooError(f"unknown export.format={fmt}; use one of {', '.join([*FILES, *native])}")
    if fmt in native:
        return fmt, "none", "native"
    if fmt not in deploy.FORMATS:
        raise ZooError(f"task {task} does not export to {fmt} ({getattr(deploy, 'WHY_NOT', {}).get(fmt, '')}); "
                       f"use export.format={' or '.join(deploy.FORMATS)}")
    quant = str(opts.get("quantize", "none"))
    if quant not in QUANTIZE:
        raise ZooError(f"unknown export.quantize={quant}; use none or int8")
    if quant == "int8" and fmt != "onnx":
        raise ZooError(f"export.quantize=int8 is ONNX Runtime quantization; use it with export.format=onnx, not {fmt}")
    samples = str(opts.get("samples", 256))
    if not samples.isdigit() or int(samples) < 1:
        raise ZooError(f"export.samples={samples} must be a positive integer (real inputs for the parity check)")
    exporter = str(opts.get("exporter", deploy.EXPORTER))
    if exporter not in ("dynamo", "torchscript"):
        raise ZooError(f"unknown export.exporter={exporter}; use dynamo or torchscript")
    return fmt, quant, exporter


def export(cfg: Any, ckpt_path: str, ckpt: dict, read: str | None = None) -> Path:
    """The whole verb once the config is composed; returns the export folder. `read`: the file the checkpoint's
    bytes come from (a snapshot of `ckpt_path`, which names the checkpoint in model.json and places the export)."""
    import torch

    from zoo import __version__
    from zoo.core.build import load_module, start

    opts = dict(cfg.get("export") or {})
    hooks = find_hooks(cfg.task)
    deploy = hooks.need("deploy", "export")
    fmt, quant, exporter = check_options(opts, deploy, cfg.task.name)
    out = out_dir(opts, Path(ckpt_path))
    read = read or ckpt_path
    left = owned.abandoned(out.parent, f".{out.name}.")  # what killed exports left; the zoo's own is removed
    if left:
        print(f"zoo: warning: {', '.join(str(p) for p in left[:3])} look(s) like the temp folder of an export that was "
              "killed, but hold no mark of the zoo's (an older zoo, or not the zoo's), so they are kept: remove them "
              "yourself once no export is writing there", flush=True)
    tmp = staging_dir(out)
    owned.mark_owner(tmp)
    if exporter == "native":  # the task's own format (nlp: a Hugging Face folder); written by the task, no parity run
        try:
            start(cfg)
            deploy.NATIVE[fmt](load_module(cfg, read), tmp)
            owned.unmark_owner(tmp)
            write_manifest(tmp, {"task": cfg.task.name, "format": fmt,
                                 "checkpoint": checkpoint_record(ckpt_path, read)})
            publish(tmp, out)
        except BaseException:
            discard(tmp)
            raise
        print(f"zoo: exported {cfg.task.name} as {fmt} to {out}", flush=True)
        return out
    try:
        start(cfg)
        module = load_module(cfg, read)
        graph = deploy.export_graph(module)
        graph.module.eval()
        samples = int(opts.get("samples", 256))
        # int8: twice the examples, so that its parity is measured on examples the calibration never saw
        batches = deploy.example_batches(module, cfg, samples * (2 if quant == "int8" else 1))
        batches, held = split_examples(batches, samples) if quant == "int8" else (batches, [])
        path = tmp / FILES[fmt]
        write_model(graph, batches[0].inputs, fmt, path, exporter)
        parity = run_parity(deploy, graph, batches, Runner(path, fmt, graph.inputs))
        report = {"fp32" if fmt == "onnx" else fmt: parity}
        if not parity["ok"]:
            raise ZooError(f"parity check failed: the exported model differs from PyTorch by "
                           f"{parity['max_abs_diff']:.3g} > tolerance {parity['tolerance']:g} on real inputs "
                           f"(agreement {parity['agreement']:.4f}); nothing was written")
        if quant == "int8":
            q = tmp / "model.int8.onnx"
            how = quantize_int8(path, q, getattr(deploy, "QUANTIZATION", "dynamic"), graph.inputs, batches)
            report["int8"] = int8_parity(deploy, graph, held or batches, Runner(q, "onnx", graph.inputs), how,
                                         held_apart=bool(held))
            os.replace(q, path)
        for name, data in deploy.extra_files(module).items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_bytes(data)
        first = batches[0].inputs
        with torch.inference_mode():
            ref = numpy_outputs(graph.module(*first))
        meta = {
            "task": cfg.task.name, "package": hooks.package, "deploy_hooks": deploy.__name__,
            "format": fmt, "file": FILES[fmt], "quantize": quant,
            "exporter": exporter if fmt == "onnx" else None, "opset": (OPSET if exporter == "dynamo" else 17)
            if fmt == "onnx" else None,
            "inputs": io_spec(graph.inputs, [t.cpu().numpy() for t in first], graph.dynamic),
            "outputs": io_spec(graph.outputs, ref, graph.dynamic),
            **deploy.metadata(module, cfg),
            "parity": report,
            "zoo_version": __version__, "torch_version": torch.__version__,
            "checkpoint": checkpoint_record(ckpt_path, read),
        }
        owned.unmark_owner(tmp)
        meta = write_manifest(tmp, meta)
        publish(tmp, out)
    except BaseException:
        discard(tmp)
        raise
    summarize(out, meta)
    return out


def checkpoint_record(ckpt_path: str, read: str | None = None) -> dict:
    return {"path": str(Path(ckpt_path).resolve()), "sha256": sha256(Path(read or ckpt_path))}


def summarize(out: Path, meta: dict) -> None:
    lines = ["", f"zoo: exported {meta['task']} -> {out / meta['file']} ({meta['format']}"
             f"{', int8' if meta['quantize'] == 'int8' else ''})"]
    for name, p in meta["parity"].items():
        metric = p.get("metric")
        extra = f", {metric['name']} torch {metric['torch']:.4f} vs {metric['exported']:.4f}" if metric else ""
        judged = f"tolerance {p['tolerance']:g}" if p["ok"] is not None else "no tolerance: compare the metric"
        held = " held-apart" if p.get("held_apart") else ""
        lines.append(f"  parity {name:<11} {p['examples']}{held} real examples: max abs diff {p['max_abs_diff']:.3g} "
                     f"({judged}), agreement {p['agreement']:.4f}{extra}")
    lines.append(f"  model.json:      {out / 'model.json'}")
    lines.append(f"  serve it:        python -m zoo serve ckpt_path={out}")
    print("\n".join(lines), flush=True)


def deploy_config(verb: str, rest: list[str], path: Path, read: Path | None = None):  # noqa: ANN202
    """The checkpoint's task config with its training overrides, plus free-form `<verb>.<option>` keys:
    (DictConfig, checkpoint dict). `read`: the file to read the checkpoint from (a snapshot of `path`)."""
    from zoo.core.checkpoint import evaluated_checkpoint
    from zoo.core.config import compose, register_resolvers
    from zoo.core.recorded import checkpoint_overrides

    ckpt, task = evaluated_checkpoint(read or path, override_value(rest, "task"))
    user = [o for o in rest if override_key(o) not in ("ckpt_path", "task", "experiment")]
    user = [f"+{o}" if o.startswith(f"{verb}.") else o for o in user]
    run_dir = path.resolve().parent.parent if path.resolve().parent.name == "checkpoints" else path.resolve().parent
    register_resolvers()
    tail = [f"run_dir='{run_dir}'", f"ckpt_path='{path.resolve()}'", "logger=none"]
    return compose(checkpoint_overrides(ckpt, task, user, tail)), ckpt


def main(rest: list[str]) -> None:
    from zoo.verbs.export import export

    for _ in range(3):  # a run still training may replace its best checkpoint between finding it and opening it
        path = checkpoint_argument("export", rest)
        with snapshot(path) as read:
            if read is None:
                continue
            try:
                cfg, ckpt = deploy_config("export", rest, path, read)
                export(cfg, str(path), ckpt, str(read))
            except ZooError as e:  # name the user's checkpoint, not the snapshot
                raise ZooError(str(e).replace(str(read), str(path))) from None
            return
    raise ZooError(f"checkpoint {path} was replaced three times while the export opened it (a run still training?); "
                   "export a checkpoint file that is not being replaced, or wait for the run to end")
