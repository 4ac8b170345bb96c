"""wheelsmith: build verified CUDA-extension wheels for Blackwell and publish them."""

__version__ = "0.1.0"
__all__ = ["__version__"]
