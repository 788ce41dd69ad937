"""eSpeak NG through ctypes, from the `espeakng-loader` wheel (it ships libespeak-ng and its voice data).

No subprocess, no system package: the same code runs wherever `pip install espeakng-loader` works.
API: https://github.com/espeak-ng/espeak-ng/blob/master/src/include/espeak-ng/speak_lib.h
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np

from zoo.errors import ZooError

_AUDIO_OUTPUT_SYNCHRONOUS = 2
_POS_CHARACTER = 1
_RATE, _VOLUME, _PITCH, _RANGE = 1, 2, 3, 4  # espeak_PARAMETER

_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)


class ESpeak:
    """One process-wide synthesiser (libespeak-ng keeps global state, so calls are serialised by a lock)."""

    _instance: ESpeak | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        try:
            import espeakng_loader
        except ImportError as e:  # pragma: no cover - a dependency of the project
            raise ZooError("espeakng-loader is not installed; pip install espeakng-loader") from e
        self._lib = ctypes.CDLL(espeakng_loader.get_library_path())
        rate = self._lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, espeakng_loader.get_data_path().encode(), 0)
        if rate <= 0:
            raise ZooError(f"libespeak-ng failed to initialise (code {rate}); reinstall espeakng-loader")
        self.sample_rate = int(rate)  # 22050 for the bundled voices
        self._chunks: list[np.ndarray] = []
        self._cb = _CALLBACK(self._collect)  # keep a reference: ctypes does not
        self._lib.espeak_SetSynthCallback(self._cb)

    @classmethod
    def get(cls) -> ESpeak:
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def _collect(self, wav, n: int, events) -> int:
        if n > 0:
            self._chunks.append(np.ctypeslib.as_array(wav, shape=(n,)).copy())
        return 0

    def synth(self, text: str, voice: str = "en-us", rate: int = 170, pitch: int = 50,
              pitch_range: int = 50) -> np.ndarray:
        """float32 waveform in [-1, 1] at `self.sample_rate`. voice: 'language' or 'language+variant' (en-us+m3)."""
        with self._lock:
            if self._lib.espeak_SetVoiceByName(voice.encode()) != 0:
                raise ZooError(f"eSpeak NG has no voice {voice!r}; use e.g. en-us, en+m3, en-gb-scotland+f2")
            for param, value in ((_RATE, rate), (_PITCH, pitch), (_RANGE, pitch_range), (_VOLUME, 100)):
                self._lib.espeak_SetParameter(param, int(value), 0)
            self._chunks = []
            data = text.encode()
            err = self._lib.espeak_Synth(data, len(data) + 1, 0, _POS_CHARACTER, 0, 0, None, None)
            if err != 0:
                raise RuntimeError(f"espeak_Synth failed with code {err}")
            chunks, self._chunks = self._chunks, []
        if not chunks:
            return np.zeros(0, dtype=np.float32)
        return np.concatenate(chunks).astype(np.float32) / 32768.0
