"""`python -m zoo serve`: HTTP inference with dynamic batching, on 127.0.0.1 only.

FastAPI + uvicorn with a small batcher of our own, not LitServe: LitServe 0.2.19 answered SIGTERM with exit code 143
and left its two inference worker processes running (measured here); a stop must drain and exit 0.
A stop (SIGTERM, Ctrl-C) drains: connections waiting in the listen backlog are accepted first, every request that
arrived before the stop is answered, or answered with a JSON 503 when it is not finished within `serve.drain_s`
(a slow client's half-sent body cannot hold the stop longer), and the last line counts them (`Drain`).

The verb knows no domain: the task's deploy module provides `Handler(meta, folder, module)` with `content_types`,
`pad` (padding value per input for variable-length axes), `decode(body, content_type) -> {input: array (k, ...)}`
and `encode(outputs for those k examples, inputs) -> JSON`; `decode` takes the request's `Budget` (zoo.kit.deploy)
as a third argument and charges it before the work it pays for. Requests are concatenated along the batch axis up to
serve.max_batch_size examples (waiting at most serve.batch_timeout_ms), run once, and split back; a request of more
examples runs as several such batches, so one request never holds more than a batch's activations.

What one request may cost is bounded: bytes (serve.max_body_mb), examples (serve.max_items), text tokens
(serve.max_tokens), image pixels (serve.max_pixels) and seconds of audio (serve.max_audio_s), each over the whole
request; past a bound the answer is one JSON line (413) naming the bound and its key.
"""


import asyncio
import inspect
import json
import logging
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from zoo.core.aliases import export_package, rewrite_export
from zoo.core.overrides import override_value
from zoo.core.resume import checkpoint_argument
from zoo.core.trust import OPT_IN
from zoo.errors import ZooError
from zoo.kit.deploy import BadRequest, Budget, Limits, pad_concat
from zoo.kit.hooks import find_hooks
from zoo.verbs.export import deploy_config
from zoo.verbs.serve_requests import Batcher, examples_in, files, limit_pixels, read_body, too_many_pixels

log = logging.getLogger("zoo")

OPTIONS = {"port": 8000, "backend": None, "max_batch_size": 32, "batch_timeout_ms": 5.0, "max_body_mb": 10.0,
           "threads": None, "workers": 1, "drain_s": 10.0, "max_pixels": Limits.pixels, "max_items": Limits.items,
           "max_tokens": Limits.tokens, "max_audio_s": Limits.audio_s}
HOST = "127.0.0.1"  # loopback only: put a real proxy in front to expose it
# option: (type, least value, what the value must be)
_NUMBERS = {"port": (int, 1, "use a port in 1..65535, e.g. serve.port=8000"),
            "max_batch_size": (int, 1, "a batch holds at least 1 request"),
            "workers": (int, 1, "at least 1 process"),
            "batch_timeout_ms": (float, 0, "milliseconds a batch waits to fill, >= 0"),
            "max_body_mb": (float, 0, "the largest request body in MB, >= 0"),
            "threads": (int, 1, "torch threads, >= 1 (null: the cores)"),
            "drain_s": (float, 0, "seconds a stop waits for requests in flight, >= 0"),
            "max_pixels": (int, 1, "the most image pixels one request may hold, >= 1"),
            "max_items": (int, 1, "the most examples (texts, images, clips, observations) one request may hold, >= 1"),
            "max_tokens": (int, 1, "the most text tokens one request may hold, >= 1"),
            "max_audio_s": (float, 0, "the most seconds of audio one request may hold, >= 0")}


def serve_options(rest: list[str]) -> dict:
    """serve.<key>=<value> from the command line (for an export folder, where no config is composed)."""
    opts: dict[str, Any] = {}
    for o in rest:
        key, _, value = o.lstrip("+").partition("=")
        if key in ("ckpt_path", OPT_IN):  # the opt-in is read where model.json is (from_export)
            continue
        if not key.startswith("serve."):
            raise ZooError(f"`zoo serve` of an export folder takes serve.<option>=... (and {OPT_IN}=true) only, "
                           f"not {o}")
        opts[key[6:]] = value
    return opts


def check_options(opts: dict) -> dict:
    unknown = sorted(set(opts) - set(OPTIONS))
    if unknown:
        known = ", ".join("serve." + k for k in OPTIONS)
        raise ZooError(f"unknown serve option serve.{unknown[0]}; use one of {known}")
    out = {**OPTIONS, **{k: v for k, v in opts.items() if v is not None}}
    if out["threads"] == "null":
        out["threads"] = None
    for key, (kind, low, what) in _NUMBERS.items():
        if out[key] is None:
            continue
        try:
            out[key] = kind(out[key])
        except (TypeError, ValueError):
            raise ZooError(f"serve.{key}={out[key]} is not {'an integer' if kind is int else 'a number'}; "
                           f"e.g. serve.{key}={OPTIONS[key] or low}") from None
        if out[key] < low or key == "port" and out[key] > 65535:
            raise ZooError(f"serve.{key}={out[key]}: {what}")
    if out["workers"] != 1:
        raise ZooError("serve.workers=1 only for now (one process batches all requests); for more, start one server "
                       "per port behind a proxy")
    if out["backend"] not in (None, "torch", "onnxruntime"):
        raise ZooError(f"unknown serve.backend={out['backend']}; use torch or onnxruntime")
    return out


# ---------------------------------------------------------------------------------------------- backends
def from_export(folder: Path, backend: str | None, threads: int | None,
                args: list[str] | None = None) -> tuple[dict, Any, Callable]:
    """An export folder, served. Its model.json is artifact data (zoo.core.trust): the modules it names must be on the
    allow-list (unless `args`, the command line, opts in), its model file must lie inside the folder, and a broken
    or truncated file is one line."""
    from zoo.core import trust
    from zoo.verbs.export import FILES, Runner

    meta = rewrite_export(read_manifest(folder))  # an older export names the domains as top-level packages
    fmt = meta["format"]
    if fmt not in FILES:
        raise ZooError(f"{folder} holds a {fmt} export, which zoo serve does not run; serve the checkpoint itself "
                       f"(ckpt_path=<run dir>) or an export.format={' or '.join(FILES)} folder")
    wanted = "onnxruntime" if fmt == "onnx" else "torch"
    if backend not in (None, wanted):
        raise ZooError(f"{folder} holds a {fmt} export, which runs on {wanted}, not serve.backend={backend}; export "
                       f"the other format, or serve the checkpoint itself for serve.backend=torch")
    # model.json names the task's package (older exports only the task: its domain is the package)
    package = export_package(meta)
    named = {"deploy": meta["deploy_hooks"]} if meta.get("deploy_hooks") else None
    source = f"{folder / 'model.json'}"
    for module in (f"{package}.deploy", *(named or {}).values()):
        trust.check_module(module, source, args)
    fix = "re-export it with `python -m zoo export ckpt_path=<run>`"
    model_file = trust.inside(folder, meta["file"], f"{source}: \"file\"", fix)
    outside = trust.links_out(folder)
    if outside:
        raise ZooError(f"{folder} holds links that lead outside it ({', '.join(outside[:3])}); an export's files lie "
                       f"inside its own folder: {fix}")
    names = [i["name"] for i in meta["inputs"]]
    try:
        runner = Runner(model_file, fmt, names, threads)
    except ZooError:
        raise
    except Exception as e:  # noqa: BLE001 - ONNX Runtime's and torch's refusals of a file cut short or not theirs
        raise ZooError(f"{model_file} does not load as a {fmt} model ({type(e).__name__}: "
                       f"{(str(e).strip().splitlines() or [''])[0][:200]}); it was cut short or is not an export: "
                       f"{fix}") from None
    deploy = find_hooks(package=package, name=meta["task"], named=named).need("deploy", "serve")

    def infer(arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
        return runner([arrays[n] for n in names])

    handler = deploy.Handler(meta, folder, None)
    if hasattr(handler, "calibrate"):  # a limit an older export recorded wrong, found once against its graph
        handler.calibrate(infer)
    return {**meta, "backend": wanted}, handler, infer


def read_manifest(folder: Path) -> dict:
    """model.json with the fields serving reads, each of its type; one line for a broken or foreign file."""
    # trust: the names it returns are checked by its caller, from_export (zoo.core.trust)
    path = folder / "model.json"
    fix = "re-export it with `python -m zoo export ckpt_path=<run>`, or serve the checkpoint itself"
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ZooError(f"{path} does not read as JSON ({(str(e).splitlines() or [''])[0]}); it was cut short or "
                       f"edited: {fix}") from None
    inputs = meta.get("inputs") if isinstance(meta, dict) else None
    fields_ok = isinstance(meta, dict) and all(isinstance(meta.get(k), str) for k in ("task", "format", "file")) \
        and all(isinstance(meta.get(k), (str, type(None))) for k in ("package", "deploy_hooks")) \
        and isinstance(inputs, list) and bool(inputs) \
        and all(isinstance(i, dict) and isinstance(i.get("name"), str) for i in inputs)
    if not fields_ok:
        raise ZooError(f"{path} is not a zoo export's model.json (task, format, file and inputs, each of its type); "
                       f"{fix}")
    return meta


def from_checkpoint(cfg: Any, ckpt_path: str, backend: str | None, threads: int | None) -> tuple:
    import torch

    from zoo.core.build import load_module, start
    from zoo.verbs.export import numpy_outputs

    if backend == "onnxruntime":
        export = Path(ckpt_path).resolve().parent.parent / "export"
        if (export / "model.json").is_file() and read_manifest(export)["format"] == "onnx":
            return from_export(export, backend, threads)
        raise ZooError(f"serve.backend=onnxruntime serves an ONNX export; run `python -m zoo export "
                       f"ckpt_path={ckpt_path}` first, then `python -m zoo serve ckpt_path=<run dir>/export`")
    start(cfg)
    if threads:
        torch.set_num_threads(threads)
    module = load_module(cfg, ckpt_path)
    deploy = find_hooks(cfg.task).need("deploy", "serve")
    graph = deploy.export_graph(module)
    graph.module.eval()
    meta = {"task": cfg.task.name, "format": "checkpoint", "backend": "torch", "checkpoint": str(ckpt_path),
            "inputs": [{"name": n} for n in graph.inputs], "outputs": [{"name": n} for n in graph.outputs],
            **deploy.metadata(module, cfg)}

    def infer(arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
        with torch.inference_mode():
            return numpy_outputs(graph.module(*[torch.from_numpy(arrays[n]) for n in graph.inputs]))

    return meta, deploy.Handler(meta, None, module), infer


# ---------------------------------------------------------------------------------------------- the app
def make_app(meta: dict, handler: Any, infer: Callable, opts: dict) -> Any:
    from contextlib import asynccontextmanager

    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException

    state: dict[str, Any] = {}
    limit = int(opts["max_body_mb"] * 1024 * 1024)
    limits = Limits(items=opts["max_items"], tokens=opts["max_tokens"], pixels=opts["max_pixels"],
                    audio_s=opts["max_audio_s"])
    # python-multipart logs each malformed upload on the server's console; the client already gets the 400 line
    logging.getLogger("python_multipart").setLevel(logging.ERROR)

    @asynccontextmanager
    async def lifespan(app: Any):  # noqa: ANN202
        batcher = Batcher(infer, handler.pad, opts["max_batch_size"], opts["batch_timeout_ms"] / 1000)
        state["batcher"], task = batcher, asyncio.create_task(batcher.run())
        state["decoder"] = ThreadPoolExecutor(1, thread_name_prefix="zoo-decode")
        yield
        task.cancel()
        state["decoder"].shutdown(wait=False, cancel_futures=True)
        batcher.worker.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)

    def error(status: int, message: str) -> JSONResponse:
        return JSONResponse({"error": " ".join(str(message).split())}, status_code=status)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        if exc.status_code not in (404, 405):  # the route was right: the routes are no help
            return error(exc.status_code, f"{exc.detail} ({request.method} {request.url.path})")
        return error(exc.status_code, f"{exc.detail}: {request.method} {request.url.path}; use POST /predict, "
                                      "GET /health or GET /metadata")

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "task": meta["task"], "backend": meta["backend"]}

    @app.get("/metadata")
    async def metadata() -> dict:
        return meta

    @app.post("/predict")
    async def predict(request: Request) -> JSONResponse:
        from starlette.requests import ClientDisconnect

        started = time.perf_counter()
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            return error(413, f"body of {int(declared)} bytes exceeds serve.max_body_mb={opts['max_body_mb']:g}")
        try:
            body = await read_body(request, limit)  # a multipart body too: its size is bounded the same way
            if ctype == "multipart/form-data" and "application/json" not in handler.content_types:
                parts = await files(request.headers, body, limits.items)
            else:
                parts = [("", body, ctype)]
            for _, _, part_type in parts:
                if not any(part_type.startswith(t) for t in handler.content_types):
                    accepted = " or ".join(t + ("*" if t.endswith("/") else "") for t in handler.content_types)
                    raise BadRequest(415, f"content type '{part_type or 'none'}' is not accepted; send {accepted}")
            # decoded beside the event loop (which must keep accepting and reading, a stop's drain too); one
            # thread, as before, for handlers whose decoders are not thread-safe (fast tokenizers)
            decoded = await asyncio.get_running_loop().run_in_executor(state["decoder"], decode_all, parts)
        except ClientDisconnect:  # the client left mid-body: no one to answer, one line for the console
            log.warning("zoo serve: a client disconnected before sending its whole request; nothing to answer")
            return error(400, "the client disconnected before the body was complete")
        except BadRequest as e:
            return error(e.status, str(e))
        except Exception as e:  # noqa: BLE001 - Pillow's refusal of an image over its pixel limit, named by type
            if "DecompressionBomb" in type(e).__name__:
                return error(413, too_many_pixels(e, opts["max_pixels"]))
            log.exception("decoding a request failed")
            return error(500, f"the request could not be decoded ({type(e).__name__}: {e})")
        try:
            inputs = decoded[0] if len(decoded) == 1 else \
                {n: pad_concat([d[n] for d in decoded], handler.pad.get(n, 0)) for n in decoded[0]}
            outputs = await state["batcher"].submit(inputs)
            result = handler.encode(outputs, inputs) if len(decoded) == 1 else \
                {"predictions": each_file(parts, decoded, outputs)}
        except Exception as e:  # noqa: BLE001 - one line for the client; the traceback goes to the log
            log.exception("inference failed")
            return error(500, f"inference failed ({type(e).__name__}: {e})")
        return JSONResponse({**result, "latency_ms": round(1000 * (time.perf_counter() - started), 2)})

    def decode_all(parts: list[tuple[str, bytes, str]]) -> list[dict[str, np.ndarray]]:
        """Each part decoded against one budget for the whole request; the examples counted again after decoding
        (a handler that does not take a budget is held to serve.max_items too)."""
        budget = Budget(limits)
        takes_budget = "budget" in inspect.signature(handler.decode).parameters
        decoded = [handler.decode(body, part_type, budget) if takes_budget else handler.decode(body, part_type)
                   for _, body, part_type in parts]
        total = sum(examples_in(d) for d in decoded)
        if total > limits.items:
            raise BadRequest(413, f"the request holds {total:,} examples, over serve.max_items={limits.items:,}; "
                                  "send less per request (split it), or start the server with a larger "
                                  "serve.max_items")
        return decoded

    def each_file(parts: list[tuple[str, bytes, str]], decoded: list[dict], outputs: list[np.ndarray]) -> list:
        """One answer per uploaded file, in upload order, each named by its file name."""
        out, start = [], 0
        for (name, _, _), inputs in zip(parts, decoded):
            k = examples_in(inputs)
            out.append({"file": name, **handler.encode([o[start:start + k] for o in outputs], inputs)})
            start += k
        return out

    return app


def check_port(port: int) -> None:
    """Fail in one line before loading the model when the port is taken (uvicorn would log and exit 3)."""
    import socket

    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT does not count
        try:
            s.bind((HOST, port))
        except OSError as e:
            raise ZooError(f"cannot listen on {HOST}:{port} ({e.strerror or e}); pick a free serve.port=") from None


def serve(opts: dict, export_dir: Path | None = None, cfg: Any = None, ckpt_path: str | None = None,
          args: list[str] | None = None) -> None:
    from zoo.verbs.export import require

    require("fastapi", "zoo serve")
    uvicorn = require("uvicorn", "zoo serve")
    opts = check_options(dict(opts))
    check_port(opts["port"])
    if export_dir is not None:
        meta, handler, infer = from_export(Path(export_dir), opts["backend"], opts["threads"], args)
    else:
        meta, handler, infer = from_checkpoint(cfg, str(ckpt_path), opts["backend"], opts["threads"])

    from zoo.verbs.drain import Drain, server_class, summary

    limit_pixels(opts["max_pixels"])
    drain = Drain(make_app(meta, handler, infer, opts), opts["drain_s"])
    ready = (f"zoo: serving {meta['task']} ({meta['backend']}) on http://{HOST}:{opts['port']} (POST /predict, "
             "GET /health, GET /metadata); stop with Ctrl-C or SIGTERM")
    # uvicorn's own limit only backs the drain's up: by then every request was answered or given its 503
    config = uvicorn.Config(drain, host=HOST, port=opts["port"], log_level="warning",
                            timeout_graceful_shutdown=int(opts["drain_s"]) + 5, access_log=False)
    server = server_class(uvicorn, drain, ready)(config)
    server.run()
    print(summary(drain, server.how), file=sys.stderr, flush=True)


def main(rest: list[str]) -> None:
    from zoo.verbs.serve import serve, serve_options

    value = override_value(rest, "ckpt_path")
    exported = Path(value).expanduser() if value else None
    if exported is not None and exported.is_file() and exported.suffix in (".onnx", ".ts", ".pt2"):
        exported = exported.parent
    if exported is not None and (exported / "model.json").is_file():  # an export folder: no checkpoint needed
        return serve(serve_options(rest), export_dir=exported, args=rest)
    path = checkpoint_argument("serve", rest)
    cfg, _ = deploy_config("serve", rest, path)
    serve(dict(cfg.get("serve") or {}), cfg=cfg, ckpt_path=str(path))
