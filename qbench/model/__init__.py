"""The model library every model job shares: Llama-family configurations and presets
(:mod:`.config`), the Hugging Face checkpoint reader (:mod:`.checkpoint`), the one Llama-family
forward with its KV cache (:mod:`.llama`, torch) and mixed recipes (:mod:`.recipe`).

The jobs (:mod:`qbench.step`, :mod:`qbench.quality`) import from here and never from each other.
Torch-free unless said.
"""
