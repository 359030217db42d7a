"""Loaders for the fine-tuning data sets' standard formats.

Each returns a list of small records (:mod:`attnlab.tasks.examples`) carrying a ``.report``
(:class:`~attnlab.tasks.examples.LoadReport`) that counts what was read, kept and skipped.
"""

from attnlab.tasks.loaders.conll import documents, iob1_to_iob2, load_conll
from attnlab.tasks.loaders.generic import load_hf_dataset, load_table
from attnlab.tasks.loaders.glue import GLUE_TASKS, GlueTask, glue_path, glue_task, load_glue, load_glue_split
from attnlab.tasks.loaders.kbert import load_kbert_classification, load_kbert_ner
from attnlab.tasks.loaders.squad import iter_squad, load_squad
from attnlab.tasks.loaders.swag import load_swag

__all__ = [
    "GLUE_TASKS",
    "GlueTask",
    "documents",
    "glue_path",
    "glue_task",
    "iob1_to_iob2",
    "iter_squad",
    "load_conll",
    "load_glue",
    "load_glue_split",
    "load_hf_dataset",
    "load_kbert_classification",
    "load_kbert_ner",
    "load_squad",
    "load_swag",
    "load_table",
]
