"""Knowledge-distillation losses, paper-agnostic: a student's outputs pulled towards a teacher's.

- `soft_target_loss`: Hinton et al. 2015 ("Distilling the Knowledge in a Neural Network", section 2): the
  cross-entropy of the student's softmax at temperature T against the teacher's at the same T, times T^2
  so that its gradients keep their size as T changes. Computed as KL(teacher || student), which differs from
  the cross-entropy by the teacher's entropy, a constant for the student: same gradients, and 0 when the
  student matches. DistilBERT's L_ce (Sanh et al. 2019, section 2) with T = 2.
- `cosine_alignment_loss`: DistilBERT's L_cos: 1 - cos(student hidden, teacher hidden), averaged over the
  real tokens (torch's ``CosineEmbeddingLoss`` with target 1, as the released distiller computes it).
- `regression_distillation_loss`: the soft target of a one-output (regression) head: the mean squared
  difference from the teacher's prediction.

Shapes: M rows (predicted positions, or examples), C classes (the vocabulary V for a masked LM), H hidden.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


def soft_target_loss(student_logits: Tensor, teacher_logits: Tensor, temperature: float = 2.0) -> Tensor:
    """``T^2 * mean over rows of KL(softmax(teacher / T) || softmax(student / T))``.

    student_logits, teacher_logits: (M, C) (any leading shape is flattened to rows). 0 with a gradient
    path when there are no rows.
    """
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(
            f"soft_target_loss: student logits {tuple(student_logits.shape)} and teacher logits "
            f"{tuple(teacher_logits.shape)} differ in shape (same vocabulary / labels expected)"
        )
    if not temperature > 0:
        raise ValueError(f"soft_target_loss: temperature must be > 0, got {temperature}")
    c = student_logits.size(-1)
    s = student_logits.reshape(-1, c).float()  # (M, C)
    t = teacher_logits.reshape(-1, c).float().detach()
    if s.size(0) == 0:
        return s.sum() * 0.0
    log_p_student = F.log_softmax(s / temperature, dim=-1)
    log_p_teacher = F.log_softmax(t / temperature, dim=-1)
    kl = F.kl_div(log_p_student, log_p_teacher, reduction="batchmean", log_target=True)  # mean over rows
    return kl * temperature**2


def cosine_alignment_loss(
    student_hidden: Tensor, teacher_hidden: Tensor, mask: Tensor | None = None
) -> Tensor:
    """``mean over kept positions of 1 - cos(student, teacher)``.

    student_hidden, teacher_hidden: (B, T, H); mask: (B, T), nonzero = a real token (None: all). The two
    hidden sizes must agree (DistilBERT's student keeps the teacher's width).
    """
    if student_hidden.shape != teacher_hidden.shape:
        raise ValueError(
            f"cosine_alignment_loss: student hidden states {tuple(student_hidden.shape)} and teacher's "
            f"{tuple(teacher_hidden.shape)} differ (the student must keep the teacher's hidden size)"
        )
    h = student_hidden.size(-1)
    s = student_hidden.reshape(-1, h).float()  # (B*T, H)
    t = teacher_hidden.reshape(-1, h).float().detach()
    if mask is not None:
        keep = mask.reshape(-1) != 0
        s, t = s[keep], t[keep]  # (M, H)
    if s.size(0) == 0:
        return s.sum() * 0.0
    return (1.0 - F.cosine_similarity(s, t, dim=-1)).mean()


def regression_distillation_loss(student: Tensor, teacher: Tensor) -> Tensor:
    """Mean squared difference between the student's and the teacher's predictions (any equal shapes)."""
    if student.shape != teacher.shape:
        raise ValueError(
            f"regression_distillation_loss: student {tuple(student.shape)} and teacher {tuple(teacher.shape)}"
        )
    return F.mse_loss(student.float(), teacher.float().detach())
