"""nlp: fine-tuning BERT-family encoders for text classification and regression (task nlp/bert)."""
