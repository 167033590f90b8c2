"""The version of fedforest (recorded in every model file)."""
__version__ = "0.1.0"
