"""Whether two tokenizers share one vocabulary, and if not, the first id where they part.

A model's embedding rows and output classes are its tokenizer's ids: fine-tuning with another tokenizer,
or distilling between two, compares or trains on the wrong words even where the sizes agree. Used by
``attnlab finetune --tokenizer`` and by distillation's teacher/student check.
"""

from __future__ import annotations

from typing import Any


def vocabulary_of(tokenizer: Any) -> dict[str, int]:
    """``{token: id}`` of any tokenizer with ``get_vocab()``."""
    get = getattr(tokenizer, "get_vocab", None)
    if get is None:
        raise TypeError(f"{type(tokenizer).__name__} has no get_vocab(): cannot compare vocabularies")
    return dict(get())


def vocabulary_difference(a: Any, b: Any, a_name: str, b_name: str) -> str | None:
    """None when tokenizers ``a`` and ``b`` have one vocabulary; otherwise their sizes and the first id
    that differs, e.g. ``"60 tokens against 93; id 0 is '<unk>' in {a_name} and '[PAD]' in {b_name}"``."""
    va, vb = vocabulary_of(a), vocabulary_of(b)
    if va == vb:
        return None
    reason = f"{len(va):,} tokens against {len(vb):,}"
    by_id_a = {i: w for w, i in va.items()}
    by_id_b = {i: w for w, i in vb.items()}
    for i in sorted(set(by_id_a) | set(by_id_b)):
        if by_id_a.get(i) != by_id_b.get(i):
            return f"{reason}; id {i} is {by_id_a.get(i)!r} in {a_name} and {by_id_b.get(i)!r} in {b_name}"
    return reason  # every id names the same token, yet the dicts differ: several tokens share an id


def check_same_vocabulary(teacher: Any, student: Any, teacher_name: str, student_name: str) -> None:
    """Raise a `ValueError` naming the first difference unless the two tokenizers have one vocabulary:
    distillation compares the teacher's and the student's predictions token id by token id."""
    reason = vocabulary_difference(teacher, student, "the teacher's", "the student's")
    if reason is None:
        return
    raise ValueError(
        f"the teacher's vocabulary ({teacher_name}) differs from the student's ({student_name}): {reason}. "
        "Distillation compares their predictions token by token, so both must use the teacher's tokenizer"
    )
