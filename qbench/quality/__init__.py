"""The quality job: a checkpoint's own weights over a real text, per scheme.

Each scheme's model (every linear of every block built by the scheme from the checkpoint's weight)
runs teacher-forced over chunks of a tokenized text; its next-token distributions are compared with
the reference model's (the checkpoint in its own dtype) as llama.cpp's ``llama-perplexity
--kl-divergence`` compares them: perplexity, KL divergence, same top token, Δp
(:mod:`qbench.quality.stats`). A job kind of :mod:`qbench.jobs`: this package and one record there.
"""
