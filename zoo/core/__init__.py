"""The layer below the verbs: config, run naming, resume, trainer, checkpoint I/O, callbacks."""
