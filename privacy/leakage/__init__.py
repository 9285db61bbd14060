"""Leakage attacks: what a protocol's participants can learn from what they see: the matcher's dictionary
attack on item tokens (``dictionary``) and the server's positive-item inference from an
uploaded gradient (``gradient_inference``)."""

from privacy.leakage.dictionary import dictionary_attack, recovery_rate
from privacy.leakage.gradient_inference import (
    infer_positive_items,
    infer_real_rows,
    precision_recall_f1,
)

__all__ = [
    "dictionary_attack",
    "infer_positive_items",
    "infer_real_rows",
    "precision_recall_f1",
    "recovery_rate",
]
