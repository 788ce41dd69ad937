"""CTCRecognizer: log-Mel front end + acoustic model + CTC loss (float32) + greedy/beam decoding + CER/WER."""

from __future__ import annotations

import logging
import os
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric
from torchmetrics.text import CharErrorRate, WordErrorRate

from zoo.errors import ZooError

from .decoding import KINDS, BeamDecoder, WordDecoder, greedy_decode
from .features import LogMel, SpecAugment
from .models import build_model
from .scoring import SpeakerScores
from .text import normalize_for_scoring
from .vocab import Vocab

log = logging.getLogger(__name__)


class CTCRecognizer(L.LightningModule):
    def __init__(self, vocab: list[str], arch: str = "whisper", sample_rate: int = 16000, n_mels: int = 80,
                 model: dict | None = None, specaugment: dict | None = None, decoder: dict | None = None,
                 rescore: dict | None = None,
                 max_seconds: float = 30.0, pretrained: str | bool | None = "auto", init_from: str | None = None,
                 num_val_examples: int = 4, voice: dict | None = None, norm: str = "bin",
                 freeze_feature_encoder: bool = True,
                 layer_decay: float = 0.9, encoder_config: dict | None = None, freeze_encoder_epochs: int = 2,
                 encoder_lr: float = 0.05, optimizer: Any = None,
                 scheduler: Any = None) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["optimizer", "scheduler"])
        if not isinstance(freeze_encoder_epochs, int) or freeze_encoder_epochs < 0:
            raise ZooError(f"task.module.freeze_encoder_epochs={freeze_encoder_epochs}: give a whole number of epochs, "
                           "0 or more (0: the encoder trains from the start)")
        self.optimizer_factory, self.scheduler_factory = optimizer, scheduler
        self.vocab = Vocab(list(vocab))
        self.features = LogMel(sample_rate, n_mels, voice=voice, norm=norm)  # voice: VTLP / pitch, training only
        self.specaugment = SpecAugment(**(specaugment or {}))
        self.pretrained_report: dict | None = None
        from zoo.core.resume import resumed_checkpoint
        from zoo.kit.pretrained import unless_resuming

        from .whisper_weights import choice

        # A resumed run: its checkpoint restores every tensor next, so no weights are read here, and an HF encoder's
        # architecture comes from the checkpoint (as load_from_checkpoint has it), not from its source again.
        resumed = resumed_checkpoint()
        self._resumed = resumed is not None
        if resumed is not None and encoder_config is None:
            encoder_config = resumed["hyper_parameters"].get("encoder_config")
        if arch != "whisper" and choice(pretrained) == "auto":
            pretrained = None  # auto: the arch's packaged weights, and only Whisper has any; the others start random
            log.info("task.module.pretrained=auto: arch %s has no packaged weights; random init", arch)
        self.model = self._acoustic_model(arch, n_mels, model, pretrained, encoder_config)
        self.decoder_cfg = {"kind": "greedy", **(decoder or {})}
        if self.decoder_cfg["kind"] not in KINDS:
            raise ZooError(f"unknown decoder kind {self.decoder_cfg['kind']!r}; use greedy, beam or words")
        self._decoder: BeamDecoder | WordDecoder | None = None
        # rescore: the decoder's n-best and Whisper tiny.en's own transcript, scored by both models (speech/rescore.py),
        # at test and predict time
        from .rescore import check

        self.rescore_cfg = check(rescore)
        self._rescorer: Any = None
        # decoder lm_text=train: the training transcripts the word LM is built from, kept in the checkpoint
        self.lm_sentences: list[str] | None = None
        # acc: the share of utterances transcribed exactly (word accuracy when each utterance is one word)
        kinds = {"cer": CharErrorRate, "wer": WordErrorRate, "acc": MeanMetric}
        self.metrics = torch.nn.ModuleDict({f"{s}_{m}": kinds[m]() for s in ("val", "test") for m in kinds})
        self._examples: list[dict] = []
        self._speakers = SpeakerScores()
        # task.module.pretrained: a speech/ctc checkpoint (any vocabulary) or weights file (speech/pretrained.py). The
        # zoo saves it as False in every checkpoint, so load_from_checkpoint never reads the source again.
        from .pretrained import load_pretrained

        if self.pretrained_report is None:  # not an HF encoder already loaded by hub id or folder
            self.pretrained_report = unless_resuming(lambda: load_pretrained(self, pretrained))

    def _acoustic_model(self, arch: str, n_mels: int, model: dict | None, pretrained: Any,
                        encoder_config: dict | None) -> torch.nn.Module:
        """The zoo's log-Mel models by name, or a wav2vec2/HuBERT/WavLM encoder (speech/models/hf.py)."""
        from .models import hf

        if arch == "whisper":
            return self._whisper(model)
        if not hf.is_hf(arch):
            return build_model(arch, n_mels, len(self.vocab), **(model or {}))
        ckpt = isinstance(pretrained, str) and os.path.isfile(os.path.expanduser(pretrained))
        if encoder_config is None and ckpt:  # a zoo checkpoint of this arch: its architecture, then its weights
            encoder_config = hf.checkpoint_encoder_config(os.path.expanduser(pretrained))
        net, config, where = hf.build(arch, len(self.vocab), None if ckpt else pretrained, encoder_config, model)
        self.hparams["encoder_config"] = config  # plain values: load_from_checkpoint rebuilds without the source
        if self.hparams.freeze_feature_encoder:
            net.freeze_feature_encoder()
        if where not in ("checkpoint", "random init"):
            self.pretrained_report = {"source": where, "line": f"{arch} encoder from {where}; new CTC head of "
                                                               f"{len(self.vocab)} characters"}
            log.info("task.module.pretrained: %s", self.pretrained_report["line"])
        return net.train()  # from_pretrained returns eval mode, and Lightning keeps submodule modes (no dropout)

    def _whisper(self, model: dict | None) -> torch.nn.Module:
        """The Whisper encoder + CTC head; its front end reads 16 kHz (files at other rates are resampled on
        reading), and the task's SpecAugment masks its features in training."""
        from .whisper_frontend import RATE

        if self.hparams.sample_rate != RATE:
            raise ZooError(f"task.module.sample_rate={self.hparams.sample_rate}: the Whisper front end takes "
                           f"{RATE} Hz audio only (what the encoder was trained on); set task.module.sample_rate="
                           f"{RATE}: files at any other rate (FSDD's 8 kHz) are resampled to it when read")
        net = build_model("whisper", self.hparams.n_mels, len(self.vocab), **(model or {}))
        net.augment = self.specaugment
        net.front.voice = self.features.voice  # task.module.voice: VTLP / pitch on the power spectrum, training only
        return net

    def on_train_epoch_start(self) -> None:
        # Whisper: the encoder is frozen for the first freeze_encoder_epochs (the new head learns against fixed
        # features first), then trains at encoder_lr of the rate; the epoch decides, so a resume agrees.
        if hasattr(self.model, "freeze_encoder"):
            self.model.freeze_encoder(self.current_epoch < self.hparams.freeze_encoder_epochs)

    # -- inference -----------------------------------------------------------------------------------------
    def forward(self, wave: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """wave (B, T) at `sample_rate`, lengths (B,) -> log-probs (B, T', V) float32, output lengths (B,)."""
        if getattr(self.model, "takes_wave", False):  # an HF encoder: its own feature extractor and masking
            logits, out_lengths = self.model(wave, lengths)
        else:
            feats, frames = self.features(wave, lengths)
            logits, out_lengths = self.model(self.specaugment(feats, frames), frames)
        return logits.float().log_softmax(-1), out_lengths

    def decode(self, log_probs: torch.Tensor, lengths: torch.Tensor,
               waves: list[torch.Tensor] | None = None) -> list[str]:
        """Transcripts of the log-probs; with `waves` (the clips at sample_rate) and task.module.rescore, the
        decoder's n-best and the greedy path jointly rescored with Whisper tiny.en (speech/rescore.py)."""
        rescore = waves is not None and self.rescore_cfg is not None and self.decoder_cfg["kind"] != "words"
        if self.decoder_cfg["kind"] == "greedy":
            greedy = greedy_decode(log_probs, lengths, self.vocab.tokens)
            return self._rescored(waves, log_probs, lengths, [[g] for g in greedy]) if rescore else greedy
        if self._decoder is None:
            opts = {k: v for k, v in self.decoder_cfg.items() if k != "kind"}
            if opts.get("lm_text") == "train":
                if not self.lm_sentences:
                    raise ZooError("decoder lm_text=train: this model holds no training transcripts (its checkpoint "
                                   "predates them); give lm_text=<a text file, one sentence per line>")
                opts["lm_text"] = list(self.lm_sentences)
            kind = WordDecoder if self.decoder_cfg["kind"] == "words" else BeamDecoder
            self._decoder = kind(self.vocab.tokens, **opts)
        if not rescore:
            return self._decoder(log_probs, lengths)
        assert isinstance(self._decoder, BeamDecoder)
        nbest = self._decoder.nbest(log_probs, lengths)
        greedy = greedy_decode(log_probs, lengths, self.vocab.tokens)
        return self._rescored(waves, log_probs, lengths, [[*n, g] for n, g in zip(nbest, greedy, strict=True)])

    def _rescored(self, waves: Any, log_probs: torch.Tensor, lengths: torch.Tensor,
                  candidates: list[list[str]]) -> list[str]:
        from .rescore import JointRescorer

        if self._rescorer is None:
            self._rescorer = JointRescorer(self.vocab.tokens, **self.rescore_cfg)
        rate = self.hparams.sample_rate
        if rate != 16000:  # tiny.en hears 16 kHz
            import torchaudio

            waves = [torchaudio.functional.resample(w.float(), rate, 16000) for w in waves]
        return self._rescorer(waves, log_probs, lengths, candidates)

    def max_seconds(self) -> float:
        """The longest clip this model transcribes: `max_seconds`, or less where the network itself takes less
        (Whisper: 30 s, less the silence it adds)."""
        cap = getattr(self.model, "max_input_seconds", None)
        limit = float(self.hparams.max_seconds)
        return min(limit, cap()) if cap is not None else limit

    def too_long(self, seconds: float) -> str | None:
        """Why a clip of `seconds` cannot be transcribed (None when it can): its own duration, the limit, the fix."""
        limit = self.max_seconds()
        if seconds <= limit:
            return None
        cap = getattr(self.model, "max_input_seconds", None)
        fix = ("split it into pieces under that (the encoder's window holds no more)" if cap is not None and
               cap() <= float(self.hparams.max_seconds) else "split it, or raise predict.max_seconds")
        return f"audio of {seconds:.1f} s is longer than the {limit:g} s this model takes; {fix}"

    @torch.no_grad()
    def transcribe(self, waves: list[torch.Tensor]) -> list[str]:
        """Waveforms (T,) at `sample_rate` -> text; refuses audio longer than `max_seconds` (memory grows with it)."""
        rate = self.hparams.sample_rate
        for w in waves:
            if (why := self.too_long(len(w) / rate)) is not None:
                raise ZooError(why)
        lengths = torch.tensor([len(w) for w in waves], device=self.device)
        batch = torch.zeros(len(waves), int(lengths.max()), device=self.device)
        for i, w in enumerate(waves):
            batch[i, : len(w)] = w.to(self.device)
        return self.decode(*self(batch, lengths), waves=list(waves))

    # -- training ------------------------------------------------------------------------------------------
    def _loss(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        log_probs, out_lengths = self(batch["wave"], batch["lengths"])
        # CTC in float32 outside autocast: in half precision the alpha/beta sums overflow or go NaN.
        with torch.autocast(device_type=log_probs.device.type, enabled=False):
            loss = F.ctc_loss(log_probs.float().transpose(0, 1), batch["targets"], out_lengths,
                              batch["target_lengths"], blank=0, reduction="mean", zero_infinity=True)
        return loss, log_probs, out_lengths

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        loss, _, _ = self._loss(batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["texts"]))
        return loss

    def _eval_step(self, batch: dict, stage: str, batch_idx: int) -> None:
        loss, log_probs, out_lengths = self._loss(batch)
        # rescoring at test time only: tiny.en's decoder costs about a second a clip, too slow for every epoch
        waves = ([batch["wave"][i, : batch["lengths"][i]] for i in range(len(batch["texts"]))]
                 if stage == "test" and self.rescore_cfg is not None else None)
        raw_hyps = self.decode(log_probs, out_lengths, waves)
        # WER and CER on the scoring rule's text (speech/text.py: case, punctuation, numbers as words)
        hyps = [normalize_for_scoring(h) for h in raw_hyps]
        refs = [normalize_for_scoring(r) for r in batch["texts"]]
        n = len(refs)
        if stage == "test":
            self._speakers.add(batch.get("speakers") or [None] * n, hyps, refs)
        self.metrics[f"{stage}_cer"].update(hyps, refs)
        self.metrics[f"{stage}_wer"].update(hyps, refs)
        self.metrics[f"{stage}_acc"].update(torch.tensor([float(h == r) for h, r in zip(hyps, refs)]))
        self.log(f"{stage}/loss", loss, batch_size=n, sync_dist=True)
        self.log(f"{stage}/cer", self.metrics[f"{stage}_cer"], batch_size=n, prog_bar=True)
        self.log(f"{stage}/wer", self.metrics[f"{stage}_wer"], batch_size=n)
        self.log(f"{stage}/acc", self.metrics[f"{stage}_acc"], batch_size=n)
        if stage == "val" and batch_idx == 0:
            k = min(n, self.hparams.num_val_examples)
            self._examples = [{"wave": batch["wave"][i, : batch["lengths"][i]].cpu(), "ref": batch["texts"][i],
                               "hyp": raw_hyps[i]} for i in range(k)]

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self._eval_step(batch, "val", batch_idx)

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self._eval_step(batch, "test", batch_idx)

    def on_fit_start(self) -> None:
        # The speakers carved out for validation (task.data.val_speakers) are part of the run: kept beside it.
        chosen = getattr(getattr(self.trainer, "datamodule", None), "chosen_val_speakers", None)
        if chosen and self.trainer.is_global_zero:
            from .scoring import write_run_file

            write_run_file(self.trainer.default_root_dir, "val_speakers.txt", "\n".join(chosen) + "\n")

    def on_test_epoch_start(self) -> None:
        self._speakers = SpeakerScores()

    def on_test_epoch_end(self) -> None:
        """Per-speaker WER into the run folder (test_speakers.tsv); with speaker groups (task.data.speakers), the
        test's WER of each group as test/wer_<group>."""
        data = getattr(self.trainer, "datamodule", None)
        groups = getattr(data, "speaker_groups", None) or {}
        for group, rate in self._speakers.group_wer(groups).items():
            self.log(f"test/wer_{group}", rate)
        if self._speakers.known() and self.trainer.is_global_zero:
            out = self._speakers.write(self.trainer.default_root_dir, groups)
            log.info("per-speaker WER: %s", out)

    def on_validation_epoch_end(self) -> None:
        if self._examples and not self.trainer.sanity_checking:
            from .tb_samples import log_examples

            log_examples(self, self._examples)
        self._examples = []

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        if self.lm_sentences:
            checkpoint["lm_sentences"] = self.lm_sentences

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.lm_sentences = checkpoint.get("lm_sentences") or self.lm_sentences

    def _keep_training_transcripts(self) -> None:
        """decoder lm_text=train: the word LM is built from the transcripts of the training split (after any carved
        validation speakers left it), which the checkpoint keeps, so test and predict decode with the same LM."""
        if self.decoder_cfg.get("lm_text") != "train" or self.lm_sentences:
            return
        rows = (getattr(getattr(self.trainer, "datamodule", None), "rows", None) or {}).get("train")
        if not rows:
            raise ZooError("decoder lm_text=train needs a training split to build the LM from; give lm_text=<a text "
                           "file, one sentence per line>")
        from .vocab import normalize_text

        self.lm_sentences = [normalize_text(r.text) for r in rows]
        self._decoder = None

    def setup(self, stage: str) -> None:
        if stage == "fit":
            self._keep_training_transcripts()
        # init_from: the deprecated spelling of pretrained. Old checkpoints keep it in their hparams, so it is read at
        # the start of a new fit only (never by load_from_checkpoint, nor on a resume: the checkpoint restores all).
        if stage == "fit" and self.hparams.init_from and self.pretrained_report is None and not self._resumed:
            from .pretrained import load_init_weights

            log.warning("task.module.init_from is deprecated: use task.module.pretrained=%s", self.hparams.init_from)
            self.pretrained_report = load_init_weights(self, self.hparams.init_from)

    def configure_optimizers(self):
        from zoo.kit.optim import configure, param_groups

        wd = getattr(self.optimizer_factory, "keywords", {}).get("weight_decay", 0.0) if self.optimizer_factory else 0.0
        if self.hparams.arch == "whisper":
            from .models.whisper import param_groups as whisper_groups

            return configure(self, whisper_groups(self.model, wd, self.hparams.encoder_lr, self.hparams.layer_decay))
        if getattr(self.model, "takes_wave", False):
            from .models.hf import param_groups as hf_groups

            return configure(self, hf_groups(self.model, wd, self.hparams.layer_decay))
        return configure(self, param_groups(self, weight_decay=wd))  # the module: norm layers found by type
