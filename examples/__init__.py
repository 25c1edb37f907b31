"""Example user models for ``python -m profiler.agent compute --model examples.tiny_model:...``."""
