"""mmtune: fine-tune multimodal language models, and know before the GPU is rented that the run fits.

Importing this package is cheap on purpose: no torch, transformers, CUDA probing or optional
backends are imported here. Heavy modules are imported by the functions that need them.
"""

__version__ = "0.1.0"
