"""BERT's fine-tuning recipe over the shared `attnlab.train.Trainer`: the names of its parts in one place.

The recipe (Devlin et al. 2019, section 4 and appendix A.3; the lecture's "dropout 0.1, 2-4 epochs,
lr one of 5e-5, 3e-5, 2e-5"): AdamW (weight decay 0.01, never on biases and LayerNorm), 10% linear
warm-up then linear decay, batch 32, dropout 0.1 on the classifier, 2 to 4 epochs. Evaluation on dev after
every epoch; the best epoch's model is kept (``<run>/best``: config.json, model.safetensors,
tokenizer.json). An optional sweep over learning rates (and seeds) keeps the learning rate with the best
median dev score and reports every run with its seed. Scores are percent (`attnlab.metrics.scale`).

Where each step lives:

- `attnlab.tasks.registry`: the tasks (`TaskSpec`, `TASKS`), their files and class names;
- `attnlab.tasks.feature_builder`: examples -> features and batches (a plug-in: K-BERT's injector is one);
- `attnlab.tasks.evaluation`: outputs -> metrics (`TaskEvaluator`), `evaluate_directory`;
- `attnlab.tasks.finetune_config`: the hyper-parameters (`FinetuneConfig`) and the starting model;
- `attnlab.tasks.finetune_run`: one run (`run_once`), the best-epoch keeper, `save_model_dir`;
- `attnlab.tasks.finetune_sweep`: learning rates x seeds (`finetune_examples`, `finetune`).
"""

from attnlab.tasks.evaluation import TaskEvaluator, evaluate_directory, evaluate_features, metric_value, score
from attnlab.tasks.feature_builder import FeatureBuilder, TaskFeatures, build_features
from attnlab.tasks.finetune_config import (
    ENCODER_DROPOUT,
    LEARNING_RATES,
    SMALL_MODEL_LEARNING_RATES,
    SMALL_MODEL_WIDTH,
    FinetuneConfig,
    ModelSource,
    default_learning_rates,
)
from attnlab.tasks.finetune_run import BestKeeper, ExtraLoss, RunResult, run_once, save_model_dir
from attnlab.tasks.finetune_sweep import (
    SELECTION_SEED,
    FinetuneResult,
    finetune,
    finetune_examples,
    finetune_outputs,
    run_settings,
    split_selection,
)
from attnlab.tasks.registry import (
    ARCHITECTURE_OF_KIND,
    KINDS,
    TASKS,
    GenericColumns,
    TaskSpec,
    data_labels,
    get_task,
    load_split,
    model_labels,
    split_path,
    task_labels,
)

__all__ = [
    "ARCHITECTURE_OF_KIND",
    "ENCODER_DROPOUT",
    "KINDS",
    "LEARNING_RATES",
    "SELECTION_SEED",
    "SMALL_MODEL_LEARNING_RATES",
    "SMALL_MODEL_WIDTH",
    "TASKS",
    "BestKeeper",
    "ExtraLoss",
    "FeatureBuilder",
    "FinetuneConfig",
    "FinetuneResult",
    "GenericColumns",
    "ModelSource",
    "RunResult",
    "TaskEvaluator",
    "TaskFeatures",
    "TaskSpec",
    "build_features",
    "data_labels",
    "default_learning_rates",
    "evaluate_directory",
    "evaluate_features",
    "finetune",
    "finetune_examples",
    "finetune_outputs",
    "get_task",
    "load_split",
    "metric_value",
    "model_labels",
    "run_once",
    "run_settings",
    "save_model_dir",
    "score",
    "split_path",
    "split_selection",
    "task_labels",
]
