"""What one request may cost a server, and what an interrupted export leaves: rows held to the harness's properties
(exit code, no traceback on the server's console, one line where it fails, the user's files unchanged, no temp files
left), each with its own check of the answers. The servers listen on 127.0.0.1; every row sends a few requests.

The memory bound itself (a 5 MB body of 10,000 texts to an nlp server) is tests/deploy/test_serve_bounds.py: the
drills' toy and tiny vision runs have no tokenizer.
"""

from __future__ import annotations

import http.client
import io
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness import Drill, Step, copy_run, play_row
from PIL import Image

READY = "zoo: serving"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port: int, body: bytes, ctype: str) -> tuple[int, dict | str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request("POST", "/predict", body=body, headers={"content-type": ctype})
        r = conn.getresponse()
        raw = r.read().decode("utf-8", "replace")
        try:
            return r.status, json.loads(raw)
        except ValueError:
            return r.status, raw  # not JSON: the check names it
    finally:
        conn.close()


def half_sent(port: int) -> None:
    """A client that sends the headers and part of the body it announced, then goes away."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100000\r\n\r\n{\"x\": [1, 2")
        time.sleep(0.2)


def multipart(files: list[tuple[str, bytes]], boundary: str = "zooboundary") -> tuple[bytes, str]:
    body = b""
    for name, data in files:
        body += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n"
                 "Content-Type: image/png\r\n\r\n").encode() + data + b"\r\n"
    return body + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def png(color: tuple[int, int, int]) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (20, 20), color=color).save(buf, format="PNG")
    return buf.getvalue()


class Requests:
    """The requests a row sends once its server is up (`Step.during`), and the answers, for the row's check."""

    def __init__(self, port: int, send: list) -> None:
        self.port, self.send, self.answers = port, send, []

    def __call__(self, where: Path) -> None:
        for request in self.send:
            try:
                self.answers.append(request(self.port))
            except OSError as e:  # the server gone or silent: the check says so
                self.answers.append((0, repr(e)))


def one_json_line(answer: tuple[int, dict | str], status: int, says: str) -> None:
    code, body = answer
    assert code == status and isinstance(body, dict) and list(body) == ["error"], answer
    assert "\n" not in body["error"] and says in body["error"], answer


def serving(port: int, requests: Requests, *opts: str) -> Step:
    return Step(["serve", "ckpt_path=run", f"serve.port={port}", *opts], 0, signal="SIGTERM", signal_when=READY,
                during=requests)


def toy_good(port: int) -> tuple[int, dict | str]:
    return post(port, b'{"x": [1, 2, 3, 4]}', "application/json")


# ---------------------------------------------------------------------------------------------------- rows
def deep_json() -> Drill:
    port = free_port()
    sent = Requests(port, [lambda p: post(p, b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "application/json"),
                           toy_good])

    def check(w: Path, consoles: list[str]) -> None:
        one_json_line(sent.answers[0], 400, "nests JSON too deeply")
        assert sent.answers[1][0] == 200, sent.answers

    return Drill("serve-json-body-nested-100k-deep", [serving(port, sent)],
                 setup=lambda w, a: copy_run(a["toy"], w / "run"), check=check,
                 promise="a JSON body nested 100,000 deep is a JSON 400 (was a plain-text 500 and a RecursionError "
                         "traceback); the server goes on")


def disconnects() -> Drill:
    port = free_port()
    sent = Requests(port, [half_sent, half_sent, half_sent, toy_good])

    def check(w: Path, consoles: list[str]) -> None:
        assert sent.answers[3][0] == 200, sent.answers
        gone = [line for line in consoles[0].splitlines() if "disconnected" in line]
        assert len(gone) <= 3 and len(consoles[0].splitlines()) <= 6, consoles[0][-3000:]

    return Drill("serve-clients-disconnect-mid-body", [serving(port, sent)],
                 setup=lambda w, a: copy_run(a["toy"], w / "run"), check=check,
                 promise="a client that goes away mid-body is one console line at most (was a 60-line "
                         "ClientDisconnect traceback per client)")


def several_files() -> Drill:
    port = free_port()
    two, ctype = multipart([("ant.png", png((40, 0, 90))), ("bee.png", png((190, 40, 90)))])
    three, ctype3 = multipart([("a.png", png((40, 0, 90)))] * 3)
    sent = Requests(port, [lambda p: post(p, two, ctype), lambda p: post(p, three, ctype3)])

    def check(w: Path, consoles: list[str]) -> None:
        code, body = sent.answers[0]
        assert code == 200 and isinstance(body, dict), sent.answers[0]
        assert [p["file"] for p in body["predictions"]] == ["ant.png", "bee.png"], body
        assert all(p["label"] in ("ants", "bees") for p in body["predictions"]), body
        one_json_line(sent.answers[1], 413, "serve.max_items=2")

    return Drill("serve-multipart-upload-of-several-images", [serving(port, sent, "serve.max_items=2")],
                 setup=lambda w, a: copy_run(a["vision"], w / "run"), check=check,
                 promise="a multipart upload of two images answers each, named by file (the second was dropped in "
                         "silence); more files than serve.max_items is a JSON 413 naming it")


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def killed_export(w: Path, a: dict) -> None:
    """A toy run beside the temp folder an export killed with -9 left (the zoo's mark in it, its pid gone)."""
    copy_run(a["toy"], w / "run")
    left = w / "run" / ".export.k1ll3d.tmp"
    left.mkdir()
    (left / "model.onnx").write_bytes(b"half written")
    (left / ".zoo-owner").write_text(json.dumps({"zoo": 1, "pid": dead_pid(), "host": os.uname().nodename}))


def after_a_killed_export() -> Drill:
    return Drill("export-after-an-export-killed-with-9",
                 [Step(["ckpt_path=run", "export.format=torchscript"])],
                 setup=killed_export, may_change=["run/.export.k1ll3d.tmp/*"],
                 check=lambda w, c: (not (w / "run" / ".export.k1ll3d.tmp").exists()
                                     or pytest.fail("the killed export's temp folder is still there")),
                 promise="the temp folder a kill -9'd export left is removed by the next export there when the "
                         "zoo's mark in it names a process that is gone (one without the mark is named, not removed)")


def rows() -> list[Drill]:
    return [deep_json(), disconnects(), several_files(), after_a_killed_export()]


@pytest.mark.parametrize("drill", rows(), ids=lambda d: d.name)
def test_drill(drill, assets, tmp_path):
    play_row(drill, assets, tmp_path)
