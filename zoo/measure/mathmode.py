"""The math a run does, as one value: Lightning's precision and the fp32 math of matmuls and cuDNN convolutions/RNNs.

One value because three places must agree on it: the trainer sets the process switches from it, `zoo bench` passes it
to each combination, and MFU divides by the peak of the math that ran. (When `32-true` set only the matmul precision,
cuDNN convolutions kept torch's default TF32: an "fp32" ResNet ran TF32 kernels and its MFU, over the fp32 peak, read
102 %.)

torch 2.9+ has one switch per backend and operator (`torch.backends.cuda.matmul.fp32_precision`,
`torch.backends.cudnn.conv.fp32_precision`, `torch.backends.cudnn.rnn.fp32_precision`: "ieee" | "tf32") next to the
legacy ones (`torch.set_float32_matmul_precision`, `torch.backends.cudnn.allow_tf32`). On torch 2.14 a reader of
either view raises when the two disagree (checked on this torch: setting only the new matmul switch to tf32 makes
`torch.get_float32_matmul_precision()`, which Lightning calls on every CUDA start, raise; setting only the new cuDNN
switches to ieee makes `torch.backends.cudnn.allow_tf32`, read by Inductor's convolution templates, raise). So
`apply()` writes both views with the same value, and `read_flags()` reads the new one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from zoo.errors import ZooError

# torch's names for the float32 matmul precision -> the fp32 math the zoo sets for matmuls and cuDNN alike
# ("medium" is taken as "high": on CUDA both are TF32; the zoo does not ask oneDNN for bf16 inside fp32 matmuls)
MATMUL_PRECISIONS = {"highest": "ieee", "high": "tf32", "medium": "tf32"}
# Lightning's short spellings -> its canonical names
ALIASES = {"32": "32-true", "64": "64-true", "16": "16-mixed", "bf16": "bf16-mixed"}
# (module path under torch.backends, what the switch governs): the new per-backend view, read by `read_flags`
SWITCHES = (("cuda.matmul", "matmul"), ("cudnn.conv", "conv"), ("cudnn.rnn", "rnn"))


@dataclass(frozen=True)
class MathMode:
    """Lightning's precision plus the fp32 math (`ieee` or `tf32`) of every fp32 matmul and cuDNN conv/RNN."""

    precision: str  # Lightning's: 32-true, bf16-mixed, 16-mixed, bf16-true, 16-true, 64-true
    fp32: str  # ieee | tf32

    @classmethod
    def of(cls, precision: str, float32_matmul_precision: str | None = None) -> MathMode:
        """From the zoo's precision (Lightning's names plus `tf32`, "auto" already resolved) and the optional
        `float32_matmul_precision` (highest | high | medium). Unset: IEEE for 32-true, TF32 for `tf32` and for the fp32
        operations of mixed and half precision (the zoo's training default on GPUs)."""
        precision = ALIASES.get(str(precision), str(precision))
        asked = None if float32_matmul_precision in (None, "") else str(float32_matmul_precision)
        if asked is not None and asked not in MATMUL_PRECISIONS:
            raise ZooError(f"trainer.float32_matmul_precision={asked} is not one of "
                           f"{', '.join(MATMUL_PRECISIONS)} (or null: from trainer.precision)")
        if precision == "tf32":
            if asked == "highest":
                raise ZooError("trainer.precision=tf32 asks for TF32 and trainer.float32_matmul_precision=highest "
                               "for IEEE fp32; drop one of them")
            return cls("32-true", "tf32")
        if asked is not None:
            return cls(precision, MATMUL_PRECISIONS[asked])
        return cls(precision, "ieee" if precision in ("32-true", "64-true") else "tf32")

    @property
    def autocast(self) -> str | None:
        """The dtype autocast runs eligible ops in (None without autocast)."""
        return "bf16" if self.precision == "bf16-mixed" else "fp16" if self.precision == "16-mixed" else None

    def apply(self) -> None:
        """Set the process's switches, both views alike (also without CUDA: they are plain settings there)."""
        import torch

        tf32 = self.fp32 == "tf32"
        torch.set_float32_matmul_precision("high" if tf32 else "highest")  # CUDA's and oneDNN's matmuls, both views
        torch.backends.cudnn.allow_tf32 = tf32  # the legacy view of cuDNN; then the new one, conv and RNN
        # torch builds these per-backend switches at run time: its type stubs do not declare them
        torch.backends.cudnn.conv.fp32_precision = self.fp32  # type: ignore[attr-defined]
        torch.backends.cudnn.rnn.fp32_precision = self.fp32  # type: ignore[attr-defined]

    def as_dict(self) -> dict[str, str | None]:
        return {**asdict(self), "autocast": self.autocast}


def read_flags() -> dict[str, str]:
    """The process's switches as they are now: what a measured step actually ran with."""
    import torch

    out = {}
    for path, name in SWITCHES:
        backend, op = path.split(".")
        out[name] = str(getattr(getattr(torch.backends, backend), op).fp32_precision)
    return out


def peak_kind(precision: str, flags: dict[str, str], device_type: str) -> str:
    """Which peak a step's FLOPs are measured against: fp32 | tf32 | bf16 | fp16 | fp64.

    The fastest math the step may have run: bf16/fp16 for (mixed) half precision; TF32 on a GPU where any fp32
    switch allowed it; fp32 otherwise (a CPU has no TF32, whatever the switches say). A lower peak than the math that
    ran is what made MFU read above 100 %.
    """
    precision = ALIASES.get(str(precision), str(precision))
    if "bf16" in precision:
        return "bf16"
    if precision.startswith("16"):
        return "fp16"
    if precision.startswith("64"):
        return "fp64"
    return "tf32" if device_type == "cuda" and "tf32" in flags.values() else "fp32"


def describe_flags(flags: dict[str, str]) -> str:
    """`matmul/conv/rnn ieee` when they agree, else `matmul tf32, conv ieee, rnn ieee`."""
    values = set(flags.values())
    if len(values) == 1:
        return f"{'/'.join(flags)} {values.pop()}"
    return ", ".join(f"{k} {v}" for k, v in flags.items())
