"""A reader for CTranslate2 `model.bin` files (no `ctranslate2` dependency): the header, every variable as a
float32 torch tensor, and the aliases.

Layout (little-endian): uint32 format version; the spec name (uint16 length, then the bytes, NUL-terminated);
uint32 spec revision; uint32 variable count; per variable its name (uint16 length + bytes), uint8 rank, rank x
uint32 dims, uint8 dtype, uint32 byte count and the raw data; then uint32 alias count and per alias two names
(alias, target). Written by CTranslate2's `ModelSpec.save` (format versions 5 and 6 read here).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch

from zoo.errors import ZooError

# CTranslate2's DataType enum -> numpy dtype (bfloat16 (5) is read as its top 16 bits of a float32)
DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16, 5: "bfloat16"}
VERSIONS = (5, 6)


@dataclass
class CT2Model:
    version: int
    spec: str
    revision: int
    variables: dict[str, torch.Tensor] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)

    def get(self, name: str) -> torch.Tensor:
        return self.variables[self.aliases.get(name, name)]


class _Reader:
    def __init__(self, f: BinaryIO, path: str) -> None:
        self.f, self.path = f, path

    def take(self, n: int) -> bytes:
        data = self.f.read(n)
        if len(data) != n:
            raise ZooError(f"{self.path} ends early (truncated?): not a complete CTranslate2 model.bin")
        return data

    def uint(self, fmt: str) -> int:
        return struct.unpack("<" + fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        raw = self.take(self.uint("H"))
        try:
            return raw.rstrip(b"\0").decode("utf-8")
        except UnicodeDecodeError:
            raise ZooError(f"{self.path} is not a CTranslate2 model.bin (garbled name)") from None


def _tensor(raw: bytes, dtype_id: int, shape: tuple[int, ...]) -> torch.Tensor:
    kind = DTYPES[dtype_id]
    if kind == "bfloat16":  # the high half of a float32
        half = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return torch.from_numpy(half.view(np.float32).reshape(shape).copy())
    arr = np.frombuffer(raw, dtype=np.dtype(kind).newbyteorder("<")).reshape(shape)
    return torch.from_numpy(arr.astype(np.float32 if arr.dtype.kind == "f" else arr.dtype.newbyteorder("=")))


def read_ct2(path: str | Path) -> CT2Model:
    """Every variable of a CTranslate2 model.bin (floats as float32); a file that is not one: one ZooError."""
    path = str(path)
    try:
        f = open(path, "rb")
    except OSError as e:
        raise ZooError(f"cannot read {path}: {e.strerror}") from None
    with f:
        r = _Reader(f, path)
        version = r.uint("I")
        if version not in VERSIONS:
            raise ZooError(f"{path} is not a CTranslate2 model.bin (format version {version}, expected "
                           f"{' or '.join(map(str, VERSIONS))})")
        model = CT2Model(version, r.string(), r.uint("I"))
        for _ in range(r.uint("I")):
            name = r.string()
            shape = tuple(r.uint("I") for _ in range(r.uint("B")))
            dtype_id, nbytes = r.uint("B"), r.uint("I")
            if dtype_id not in DTYPES:
                raise ZooError(f"{path}: variable {name} has an unknown CTranslate2 dtype {dtype_id}")
            width = 2 if DTYPES[dtype_id] == "bfloat16" else np.dtype(DTYPES[dtype_id]).itemsize
            if nbytes != width * int(np.prod(shape, dtype=np.int64)):
                raise ZooError(f"{path}: variable {name} holds {nbytes} bytes for shape {shape}; the file is damaged")
            model.variables[name] = _tensor(r.take(nbytes), dtype_id, shape)
        for _ in range(r.uint("I")):
            alias = r.string()
            model.aliases[alias] = r.string()
        if f.read(1):
            raise ZooError(f"{path}: bytes after the last alias; not a CTranslate2 model.bin this reader knows")
    return model


def write_ct2(path: str | Path, spec: str, variables: dict[str, torch.Tensor], aliases: dict[str, str] | None = None,
              revision: int = 3, version: int = 6, half: bool = True) -> Path:
    """The inverse of read_ct2 (floats stored as float16 when `half`): tiny synthetic models for tests."""

    def name(s: str) -> bytes:
        raw = s.encode() + b"\0"
        return struct.pack("<H", len(raw)) + raw

    out = [struct.pack("<I", version), name(spec), struct.pack("<I", revision), struct.pack("<I", len(variables))]
    inverse = {np.dtype(v) if v != "bfloat16" else v: k for k, v in DTYPES.items()}
    for key, value in variables.items():
        arr = value.detach().cpu().numpy()
        if arr.dtype.kind == "f":
            arr = arr.astype(np.float16 if half else np.float32)
        out += [name(key), struct.pack("<B", arr.ndim), struct.pack(f"<{arr.ndim}I", *arr.shape),
                struct.pack("<BI", inverse[arr.dtype], arr.nbytes), arr.astype(arr.dtype.newbyteorder("<")).tobytes()]
    out.append(struct.pack("<I", len(aliases or {})))
    for alias, target in (aliases or {}).items():
        out += [name(alias), name(target)]
    Path(path).write_bytes(b"".join(out))
    return Path(path)
