"""Peak prediction: decaying-histogram models of pod, node, priority-class and system usage,
trained from the metric cache and checkpointed to disk, and the ProdReclaimable predictor
that turns them into NodeMetric's ``prodReclaimableMetric`` and ``prodPeakMetric``."""

from koordlet.prediction.config import PredictionConfig, checkpoint_dir_under
from koordlet.prediction.predictor import ProdReclaimablePredictor, prod_reclaimable_factory
from koordlet.prediction.server import PeakPredictServer, Usage

__all__ = [
    "PeakPredictServer",
    "PredictionConfig",
    "ProdReclaimablePredictor",
    "Usage",
    "checkpoint_dir_under",
    "prod_reclaimable_factory",
]
