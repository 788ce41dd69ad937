"""Fine-tuning a BERT-family encoder for sequence classification or regression, the way run_glue does it.

Any encoder `AutoModelForSequenceClassification` knows (BERT, RoBERTa, DistilBERT, MiniLM, ...), by hub id, alias
or local directory. The encoder's config and the tokenizer files travel with the checkpoint, so
`SequenceClassifier.load_from_checkpoint(path)` rebuilds the model without any network or source directory.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from omegaconf import DictConfig, ListConfig

from zoo.base import plain
from zoo.core.resume import resumed_checkpoint
from zoo.core.validate import check_probability
from zoo.errors import ZooError
from zoo.kit import tb
from zoo.kit.optim import configure
from zoo.nlp.hf_folder import HFExport, tokenizer_from_files, tokenizer_to_files
from zoo.nlp.metrics import make_metrics
from zoo.nlp.models import freeze, load_classifier, load_config, load_tokenizer, param_groups
from zoo.nlp.models.hub import attention_kwargs, with_dropout

log = logging.getLogger(__name__)
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class SequenceClassifier(pl.LightningModule):
    def __init__(self, encoder: str = "sentence-transformers/all-MiniLM-L6-v2", pretrained: bool | str = "auto",
                 label_names: list[str] | None = None, task_type: str = "classification",
                 metrics: list[str] | None = None, weight_decay: float = 0.01, layer_decay: float = 1.0,
                 freeze_embeddings: bool = False, freeze_layers: int = 0, classifier_dropout: float | None = None,
                 dropout: float | None = None, attention: str = "auto", worst_k: int = 10, export_hf: bool = True,
                 encoder_config: dict | None = None, optimizer: Any = None, scheduler: Any = None) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["optimizer", "scheduler"])
        self.optimizer_factory, self.scheduler_factory = optimizer, scheduler
        # hydra.instantiate(cfg, **model_kwargs) turns the data's plain lists into ListConfig, which
        # torch.load(weights_only=True) refuses: store plain lists.
        for key in ("label_names", "metrics", "encoder_config"):
            value = self.hparams[key]
            self.hparams[key] = plain(value) if isinstance(value, (DictConfig, ListConfig)) else value
        label_names, metrics = self.hparams.label_names, self.hparams.metrics
        if task_type == "classification" and not label_names:
            raise ZooError("classification needs label names (the data module provides them); "
                           "set task.data.task_type=regression for numeric targets")
        self.num_labels = 1 if task_type == "regression" else len(label_names)
        attention_kwargs(attention)  # a wrong name is one line here, before any weights load
        if dropout is not None:
            check_probability("task.module.dropout", float(dropout))
        self.pretrained_report: dict | None = None
        resumed = resumed_checkpoint()
        if resumed is not None and encoder_config is None:  # a resume: its checkpoint restores every tensor next
            encoder_config = self.hparams["encoder_config"] = resumed["hyper_parameters"].get("encoder_config")
            self.pretrained_report = resumed["pretrained_report"]
        if encoder_config is None:  # a new run: config, tokenizer and (if pretrained) weights from the source
            config, kind = self._new_model(encoder, pretrained)
            try:
                self.tokenizer = load_tokenizer(encoder)
            except ZooError:
                if kind == "true":
                    raise
                self.tokenizer = None  # random init of a built-in architecture: setup() takes the data's tokenizer
        else:  # from a checkpoint: architecture from hparams, weights from the state dict, tokenizer restored later
            from transformers import AutoConfig, AutoModelForSequenceClassification

            # The run's dropout wins over the recorded one: a resume that changes it trains (and records) the new value.
            config = self._run_dropout(AutoConfig.for_model(**encoder_config))
            self.model = AutoModelForSequenceClassification.from_config(config, **attention_kwargs(attention))
            self.tokenizer = None
        # Plain JSON values (weights_only-safe); load_from_checkpoint passes it back to __init__.
        self.hparams["encoder_config"] = json.loads(config.to_json_string())
        self.model.train()  # from_pretrained returns eval mode, and Lightning keeps submodule modes (no dropout)
        self._freeze(freeze_embeddings, freeze_layers)
        names = list(metrics or (["acc"] if task_type == "classification" else ["pearson", "spearman"]))
        self.metric_names = names
        self.val_metrics = make_metrics(names, task_type, self.num_labels)
        self.test_metrics = make_metrics(names, task_type, self.num_labels)
        self._worst: list[tuple] = []
        self._train_sec, self._tokens, self._slots, self._t0 = 0.0, 0, 0, 0.0

    def _new_model(self, encoder: str, pretrained: bool | str) -> tuple[Any, str]:
        """self.model with the weights `pretrained` names (nlp/pretrained.py), and its report; -> (config, kind)."""
        from zoo.nlp import pretrained as pt

        kind = pt.choice(pretrained)
        try:
            config = self._config(encoder, kind == "true")
            self.model, info, where = load_classifier(encoder, config, kind in ("true", "auto"), with_info=True,
                                                      attention=self.hparams.attention)
        except ZooError as e:
            if kind != "auto":
                raise
            log.warning("pretrained=auto: no weights for %s (%s); training from RANDOM INIT", encoder, e)
            config = self._config(encoder, False)
            self.model, info, where = load_classifier(encoder, config, False, with_info=True,
                                                      attention=self.hparams.attention)
        if kind == "source":
            self.pretrained_report = pt.announce(pt.transfer(self.model, str(pretrained), config))
        elif where != "random init":
            self.pretrained_report = pt.announce(pt.info_report(self.model, info, where))
        return config, kind

    def _num_layers(self) -> int:
        config = self.model.config
        return int(getattr(config, "num_hidden_layers", None) or getattr(config, "n_layers", 0))

    def _freeze(self, embeddings: bool, layers: int) -> None:
        layers = int(layers)
        total = self._num_layers()
        if not 0 <= layers <= total:
            raise ZooError(f"task.module.freeze_layers={layers} is outside 0..{total} (this encoder has {total} "
                           "layers)")
        frozen = freeze(self.model, bool(embeddings), layers, total)
        if frozen:
            what = f"embeddings and the bottom {layers} of {total} layers" if layers else "embeddings"
            log.info("frozen: the %s (%.1f M parameters); the rest trains", what, frozen / 1e6)

    def _config(self, encoder: str, pretrained: bool) -> Any:
        """The encoder's config with this task's head and the run's dropout (saved in the checkpoint's
        encoder_config)."""
        return self._run_dropout(load_config(encoder, pretrained, **self._head_config()))

    def _run_dropout(self, config: Any) -> Any:
        """`config` with the dropout values this run sets (None: as the config has them)."""
        hp = self.hparams
        if hp.classifier_dropout is not None:
            config.classifier_dropout = hp.classifier_dropout
        return config if hp.dropout is None else with_dropout(config, hp.dropout)

    def _head_config(self) -> dict:
        hp = self.hparams
        kw: dict[str, Any] = {"num_labels": self.num_labels}
        if hp.task_type == "regression":
            kw["problem_type"] = "regression"
        else:
            kw["problem_type"] = "single_label_classification"
            kw["id2label"] = dict(enumerate(hp.label_names))
            kw["label2id"] = {n: i for i, n in enumerate(hp.label_names)}
        return kw

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T) token ids -> (B, num_labels) logits, or (B,) scores for regression."""
        kw = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
        logits = self.model(input_ids=input_ids, attention_mask=attention_mask, **kw).logits.float()
        return logits.squeeze(-1) if self.hparams.task_type == "regression" else logits

    def _shared_step(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """-> (mean loss, per-example loss (B,), logits or scores)."""
        out = self(**{k: batch[k] for k in INPUTS if k in batch})
        if self.hparams.task_type == "regression":
            per = F.mse_loss(out, batch["labels"].float(), reduction="none")
        else:
            per = F.cross_entropy(out, batch["labels"], reduction="none")
        return per.mean(), per, out

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        loss, _, _ = self._shared_step(batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["text"]))
        self._tokens += int(batch["attention_mask"].sum())
        self._slots += batch["attention_mask"].numel()
        return loss

    def on_train_epoch_start(self) -> None:
        self._train_sec, self._tokens, self._slots = 0.0, 0, 0

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self._t0 = time.perf_counter()

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._train_sec += time.perf_counter() - self._t0  # training steps only, not the validation inside the epoch

    def on_train_epoch_end(self) -> None:
        # Real (non-pad) tokens per second of training, and how much of each batch was padding.
        dt = self._train_sec
        if self._slots and dt > 0:
            world = self.trainer.world_size
            self.log("train/tokens_per_sec", self._tokens * world / dt, rank_zero_only=True)
            self.log("train/pad_fraction", 1 - self._tokens / self._slots, rank_zero_only=True)
            self.log("train/epoch_sec", dt, rank_zero_only=True)

    def _eval_step(self, batch: dict, stage: str) -> None:
        loss, per, out = self._shared_step(batch)
        preds = out if self.hparams.task_type == "regression" else out.argmax(-1)
        metrics = self.val_metrics if stage == "val" else self.test_metrics
        for name, m in metrics.items():
            m.update(preds, batch["labels"])
            self.log(f"{stage}/{name}", m, prog_bar=name == self.metric_names[0], batch_size=len(batch["text"]))
        self.log(f"{stage}/loss", loss, sync_dist=True, batch_size=len(batch["text"]))
        if stage == "val" and self.hparams.worst_k:
            self._keep_worst(batch, per, out)

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self._eval_step(batch, "val")

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self._eval_step(batch, "test")

    def predict_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        out = self(**{k: batch[k] for k in INPUTS if k in batch})
        return out if self.hparams.task_type == "regression" else out.softmax(-1)

    # --- worst validation mistakes -> TensorBoard text ------------------------------------------------------------
    def _keep_worst(self, batch: dict, per: torch.Tensor, out: torch.Tensor) -> None:
        regression = self.hparams.task_type == "regression"
        labels = batch["labels"].detach().cpu()
        out = out.detach().float().cpu()
        for i in per.detach().float().cpu().topk(min(self.hparams.worst_k, len(per))).indices.tolist():
            if regression:
                row = (float(per[i]), batch["text"][i], f"{float(labels[i]):.3f}", f"{float(out[i]):.3f}")
            else:
                pred = int(out[i].argmax())
                if pred == int(labels[i]):
                    continue  # high loss but right: not a mistake
                names = self.hparams.label_names
                row = (float(per[i]), batch["text"][i], names[int(labels[i])],
                       f"{names[pred]} ({float(out[i].softmax(-1)[pred]):.2f})")
            self._worst.append(row)

    def on_validation_epoch_start(self) -> None:
        self._worst = []

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking or not self._worst:
            return
        worst = sorted(self._worst, key=lambda r: -r[0])[: self.hparams.worst_k]
        lines = ["| loss | text | true | predicted |", "|---:|---|---|---|"]
        for loss, text, true, pred in worst:
            text = text.replace("|", "\\|")
            lines.append(f"| {loss:.3f} | {text} | {true} | {pred} |")
        tb.log_text(self, "val/worst_mistakes", "\n".join(lines))

    # --- checks, checkpoint extras, callbacks, optimiser -----------------------------------------------------------
    def setup(self, stage: str) -> None:
        dm = getattr(self.trainer, "datamodule", None)
        if self.tokenizer is None and getattr(dm, "tokenizer", None) is not None:
            self.tokenizer = dm.tokenizer  # (data modules set up before the module)
        if dm is not None and hasattr(dm, "check_model"):
            dm.check_model(self)  # the task-type and label checks live once, in zoo.nlp.data
        ckpt = self.trainer.checkpoint_callback
        monitor = getattr(ckpt, "monitor", None)
        logged = {f"val/{n}" for n in self.metric_names} | {"val/loss"}
        if monitor and monitor.startswith("val/") and monitor not in logged:
            raise ZooError(f"task.monitor={monitor} is not logged by this task; use one of {sorted(logged)} "
                           "(e.g. task.monitor=val/pearson task.mode=max for regression)")

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        if self.tokenizer is not None:
            checkpoint["nlp_tokenizer"] = tokenizer_to_files(self.tokenizer)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        if self.tokenizer is None and "nlp_tokenizer" in checkpoint:
            self.tokenizer = tokenizer_from_files(checkpoint["nlp_tokenizer"])

    def configure_callbacks(self) -> list:
        # once per trainer: the test after fit would otherwise replace fit's copy, and Lightning says so on the console
        present = self._trainer is not None and any(isinstance(c, HFExport) for c in self.trainer.callbacks)
        return [HFExport()] if self.hparams.export_hf and not present else []

    def configure_optimizers(self) -> Any:
        layers = self._num_layers() or None
        return configure(self, param_groups(self.model, self.hparams.weight_decay, self.hparams.layer_decay, layers))
