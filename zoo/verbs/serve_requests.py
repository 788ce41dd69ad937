"""`zoo serve`'s requests: reading a body within serve.max_body_mb, the files of a multipart upload (at most
serve.max_items), Pillow's pixel limit, and the batcher that runs requests together in batches of at most
serve.max_batch_size examples (a request of more runs as several batches)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from zoo.kit.deploy import BadRequest, pad_concat


class Batcher:
    """Collects requests for up to `timeout` seconds or `max_batch` examples, runs them as one batch in a worker
    thread (the event loop keeps accepting), and hands each request its slice of the outputs."""

    def __init__(self, infer: Callable, pad: dict[str, float], max_batch: int, timeout: float) -> None:
        self.infer, self.pad, self.max_batch, self.timeout = infer, pad, max_batch, timeout
        # one thread runs every batch, in order: each further thread that runs torch can add its own malloc arena
        # and thread pool to the process
        self.worker = ThreadPoolExecutor(1, thread_name_prefix="zoo-infer")
        self.queue: asyncio.Queue = asyncio.Queue()
        self.batches = 0

    async def submit(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The outputs for these examples; more than a batch holds are queued as several batches (their outputs
        joined, padded along variable-length axes as the inputs are)."""
        k = examples_in(inputs)
        if k <= self.max_batch:
            return await self._one(inputs)
        parts = [{n: a[i:i + self.max_batch] for n, a in inputs.items()} for i in range(0, k, self.max_batch)]
        outs = await asyncio.gather(*(self._one(p) for p in parts))
        return [pad_concat([o[j] for o in outs], 0) for j in range(len(outs[0]))]

    async def _one(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        fut = asyncio.get_running_loop().create_future()
        await self.queue.put((inputs, fut))
        return await fut

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        held = None  # a request that did not fit the last batch: it opens the next one
        while True:
            items = [held or await self.queue.get()]
            held, count = None, examples_in(items[0][0])
            deadline = loop.time() + self.timeout
            while count < self.max_batch:
                try:
                    item = await asyncio.wait_for(self.queue.get(), max(0.0, deadline - loop.time()))
                except TimeoutError:
                    break
                if count + examples_in(item[0]) > self.max_batch:
                    held = item
                    break
                items.append(item)
                count += examples_in(item[0])
            try:  # joining the inputs inside too: an error here must not end this task (every later request waits)
                arrays = {n: pad_concat([i[n] for i, _ in items], self.pad.get(n, 0)) for n in items[0][0]}
                outputs = await loop.run_in_executor(self.worker, self.infer, arrays)
            except Exception as e:  # noqa: BLE001 - answered as a 500 for these requests; the server goes on
                for _, fut in items:
                    if not fut.done():  # a request cancelled meanwhile (the stop's deadline) wants nothing
                        fut.set_exception(e)
                continue
            self.batches += 1
            start = 0
            for inputs, fut in items:
                k = examples_in(inputs)
                if not fut.done():
                    fut.set_result([o[start:start + k] for o in outputs])
                start += k


def examples_in(inputs: dict[str, np.ndarray]) -> int:
    return len(next(iter(inputs.values())))


async def read_body(request: Any, limit: int) -> bytes:
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BadRequest(413, f"body exceeds serve.max_body_mb={limit / 2**20:g}")
        chunks.append(chunk)
    return b"".join(chunks)


async def files(headers: Any, body: bytes, most: int) -> list[tuple[str, bytes, str]]:
    """Every file of a multipart form (name, bytes, content type), in upload order; more than `most`
    (serve.max_items) is refused before any is read."""
    from starlette.datastructures import UploadFile
    from starlette.formparsers import MultiPartException, MultiPartParser

    async def stream() -> Any:
        yield body
        yield b""

    try:
        form = await MultiPartParser(headers, stream(), max_files=most, max_fields=most).parse()
    except MultiPartException as e:  # a body that is not the multipart form its header declares, or too many files
        if "Too many files" in e.message:
            raise BadRequest(413, f"the multipart form holds more than {most:,} files, over serve.max_items="
                                  f"{most:,}; send fewer per request, or start the server with a larger "
                                  "serve.max_items") from None
        raise BadRequest(400, f"the multipart body does not parse ({e.message.rstrip('.')}); upload a file as "
                              "a form field (curl -F file=@image.png), or send the "
                              "file's bytes with its own content type") from None
    try:
        files = [(str(v.filename or key), await v.read(), (v.content_type or "application/octet-stream").lower())
                 for key, v in form.multi_items() if isinstance(v, UploadFile)]
    finally:
        await form.close()  # the spooled temp files of large parts
    if not files:
        raise BadRequest(400, "the multipart form holds no file; upload one, e.g. curl -F file=@image.png")
    return files


def too_many_pixels(e: Exception, limit: int) -> str:
    import re

    found = re.search(r"\((\d+) pixels\)", str(e))
    size = f"{int(found.group(1)):,} pixels" if found else "too many pixels"
    return (f"the image has {size}, over the limit serve.max_pixels={limit:,}; send a smaller image (or start the "
            "server with a larger serve.max_pixels)")


def limit_pixels(limit: int) -> None:
    """Pillow refuses images over `limit` pixels when it opens them, before decoding a byte of a decompression bomb
    (by default it only warns up to twice its own limit)."""
    import warnings

    try:
        from PIL import Image
    except ImportError:
        return
    Image.MAX_IMAGE_PIXELS = limit
    warnings.simplefilter("error", Image.DecompressionBombWarning)
