"""Small measures over model outputs shared by tests and tools."""
from __future__ import annotations

from typing import Sequence

import numpy as np


def perplexity(logits: np.ndarray, ids: Sequence[int]) -> float:
    """exp(mean negative log-likelihood) of ids[1:] under logits[:-1] (row i
    predicts token i + 1), computed in float64."""
    ids = np.asarray(ids)
    lg = np.asarray(logits, dtype=np.float64)[: len(ids) - 1]
    mx = lg.max(axis=1)
    lse = np.log(np.exp(lg - mx[:, None]).sum(axis=1)) + mx
    return float(np.exp((lse - lg[np.arange(len(ids) - 1), ids[1:]]).mean()))
