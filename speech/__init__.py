"""speech: end-to-end CTC speech recognition (log-Mel front end, CRNN / Conformer acoustic models)."""
