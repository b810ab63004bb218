"""A whole environment of LLM serving: ServingStackArgs (the intent, as a stack file states it), the
planners and rules over it, and the ServingStack component that builds it."""

from .args import ClusterFacts, ServingStackArgs
from .stack import ModelPlan, ServingStack

__all__ = ["ClusterFacts", "ModelPlan", "ServingStack", "ServingStackArgs"]
