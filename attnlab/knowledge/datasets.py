"""K-BERT's dataset files: their loaders live with the other task loaders (`attnlab.tasks.loaders.kbert`);
this name stays for the code that imports them from the knowledge package."""

from attnlab.tasks.loaders.kbert import load_kbert_classification, load_kbert_ner

__all__ = ["load_kbert_classification", "load_kbert_ner"]
